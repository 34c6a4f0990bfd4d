"""The tests' launcher of member processes (tests/support/launch.py), on tiny programs: exit
codes kept after the exit, runs and their logs, waiting for a line, and the process group
cleared up (what a program starts goes with it)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from support.broker import wait_until
from support.launch import MemberProcess

#: Starts a child that outlives it unless killed (its pid in the file given, written before
#: the HELLO line that the tests wait for), prints its run's argument, then sleeps or exits
#: with the code given.
PROGRAM = """\
import pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
pathlib.Path(sys.argv[2]).write_text(str(child.pid))
print("HELLO", sys.argv[1], flush=True)
if sys.argv[3] == "sleep":
    time.sleep(300)
sys.exit(int(sys.argv[3]))
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended and not yet reaped by init, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def launcher(tmp_path: Path, end: str) -> MemberProcess:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    return MemberProcess("p", program, tmp_path / "logs", ["x", str(tmp_path / "child"), end])


def test_the_exit_code_and_every_runs_log_are_kept(tmp_path: Path) -> None:
    process = launcher(tmp_path, "3")
    assert process.returncode is None and not process.running
    for run in (1, 2):
        process.start()
        assert process.line("HELLO") == "HELLO x"
        assert process.wait(30) == 3 and process.returncode == 3
        assert process.runs == run and (tmp_path / "logs" / f"p-{run}.log").exists()
        process.reap()
    assert process.log_text() == "HELLO x\nHELLO x\n"
    with pytest.raises(AssertionError, match=r"exited \(3\) before 'NEVER'"):
        process.line("NEVER")


def test_kill_and_reap_end_the_whole_process_group(tmp_path: Path) -> None:
    process = launcher(tmp_path, "sleep")
    process.start()
    process.line("HELLO")
    child = int((tmp_path / "child").read_text())
    with pytest.raises(AssertionError, match=r"did not exit within 0\.5 s"):
        process.wait(0.5)
    process.kill()
    assert process.returncode == -signal.SIGKILL
    wait_until(lambda: not alive(child), 10, "the child to end")


def test_terminate_waits_for_the_group_and_reaps_what_is_left(tmp_path: Path) -> None:
    process = launcher(tmp_path, "sleep")
    process.start()
    process.line("HELLO")
    child = int((tmp_path / "child").read_text())
    process.signal(signal.SIGTERM, group=False)  # the program alone: its child stays
    assert process.wait(30) == -signal.SIGTERM
    assert alive(child)
    process.wait_group_gone(0.5)  # the child does not go by itself: SIGKILLed
    wait_until(lambda: not alive(child), 10, "the child to end")
