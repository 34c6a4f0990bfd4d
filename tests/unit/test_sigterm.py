"""Leaving the group on SIGTERM: the handler never waits on a lock its own thread holds.

Each case runs in a child process, since it ends with SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import logging, os, signal, sys, threading, time
    from spark_groups.group.sigterm import leave_on_sigterm

    logging.basicConfig(level=logging.INFO)
    marker = sys.argv[1]
    if sys.argv[2] == "own-handler":
        def own(signum, frame):
            open(marker + ".own", "w").write("called")
            sys.exit(7)
        signal.signal(signal.SIGTERM, own)

    # The owner thread logs while it leaves, as the member's revocation callback does.
    asked = threading.Event()
    def owner():
        asked.wait()
        logging.getLogger("spark_groups.test").info("owner thread leaving")
    owner_thread = threading.Thread(target=owner, daemon=True)
    owner_thread.start()

    def leave():
        asked.set()
        owner_thread.join()
        open(marker, "w").write("left")

    assert leave_on_sigterm(leave, "test group")
    # Both SIGTERMs (Spark sends two) arrive while the main thread is inside logging.
    with logging.getLogger().handlers[0].lock:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the main thread's work inside the lock, interrupted by the handler
    while True:
        time.sleep(0.1)  # as the reader process blocks on Spark's socket
    """
)


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "left"), mode],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_sigterm_inside_a_lock_still_leaves_then_ends_the_process(tmp_path: Path) -> None:
    done = _run(tmp_path, "default")
    assert (tmp_path / "left").read_text() == "left", done.stderr
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stderr.count("SIGTERM: leaving test group") == 1


def test_the_handler_that_was_there_before_runs_after_leaving(tmp_path: Path) -> None:
    done = _run(tmp_path, "own-handler")
    assert (tmp_path / "left").read_text() == "left", done.stderr
    assert (tmp_path / "left.own").read_text() == "called"
    assert done.returncode == 7, done.stderr


def test_off_the_main_thread_nothing_is_installed() -> None:
    import threading

    from spark_groups.group.sigterm import leave_on_sigterm

    installed: list[bool] = []
    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=lambda: installed.append(leave_on_sigterm(lambda: None, "g")))
    thread.start()
    thread.join()
    assert installed == [False]
    assert signal.getsignal(signal.SIGTERM) is before
