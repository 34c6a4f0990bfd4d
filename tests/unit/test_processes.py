"""The launchers' child process (spark_groups.tools.processes), with tiny real Python children:
readiness, errors carrying the log's end, the stop signal then SIGKILL, what a detached
child leaves behind, and the context manager."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Self

import pytest

from spark_groups.tools.processes import (
    Launcher,
    ManagedProcess,
    free_ports,
    port_open,
    stop_all,
)


class StartFailed(Exception):
    pass


def python(code: str) -> list[str]:
    """A command running ``code`` in this interpreter, unbuffered."""
    return [sys.executable, "-u", "-c", code]


def listener(port: int, extra: str = "") -> list[str]:
    """A child that listens on ``port`` (after running ``extra``) until it is stopped."""
    return python(
        "import signal, socket, subprocess, sys, time\n"
        f"{extra}\n"
        "s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen()\n"
        "print('listening', flush=True)\n"
        "while True: time.sleep(0.1)\n" % port
    )


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def eventually(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_free_ports_are_distinct_and_free() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3
    assert not any(port_open(p, timeout_s=0.2) for p in ports)


def test_wait_until_ready_returns_once_the_child_serves(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    process = ManagedProcess("the listener")
    assert not process.running and process.pid is None
    process.start(listener(port), tmp_path / "out.log")
    try:
        process.wait_until_ready(lambda: port_open(port), timeout_s=30, what="listen")
        assert process.running and process.pid is not None
        assert "listening" in process.log_tail()
    finally:
        process.stop(grace_s=10)
    assert not process.running and process.pid is None
    assert not port_open(port)


def test_a_child_that_exits_at_start_fails_with_its_code_and_log(tmp_path: Path) -> None:
    process = ManagedProcess("the crasher", error=StartFailed)
    process.start(python("import sys; print('bad config'); sys.exit(3)"), tmp_path / "out.log")
    with pytest.raises(StartFailed) as failed:
        process.wait_until_ready(lambda: False, timeout_s=30, what="listen")
    message = str(failed.value)
    assert message.startswith("the crasher exited with code 3 at start")
    assert str(tmp_path / "out.log") in message and "bad config" in message
    process.stop(grace_s=1)


def test_a_timeout_fails_with_the_end_of_the_log_and_leaves_the_child(tmp_path: Path) -> None:
    process = ManagedProcess("the sleeper", error=StartFailed)
    process.start(
        python("import time\nprint('x' * 9000)\nprint('still starting')\ntime.sleep(60)"),
        tmp_path / "out.log",
    )
    started = time.monotonic()
    try:
        with pytest.raises(StartFailed) as failed:
            process.wait_until_ready(lambda: False, timeout_s=1, what="serve", poll_s=0.05)
        assert 1 <= time.monotonic() - started < 10
        message = str(failed.value)
        assert message.startswith("the sleeper did not serve within 1 s")
        assert message.rstrip().endswith("still starting")
        assert len(message) < 5000  # the end of the log, not all of it
        assert process.running  # stopping it is the caller's decision
    finally:
        process.stop(grace_s=10)


def test_an_error_of_ready_goes_through(tmp_path: Path) -> None:
    process = ManagedProcess("the sleeper")
    process.start(python("import time; time.sleep(60)"), tmp_path / "out.log")

    def ready() -> bool:
        raise ValueError("the probe failed")

    try:
        with pytest.raises(ValueError, match="the probe failed"):
            process.wait_until_ready(ready, timeout_s=30, what="serve")
    finally:
        process.stop(grace_s=10)


def test_another_process_exiting_fails_the_wait_with_its_log(tmp_path: Path) -> None:
    main, other = ManagedProcess("the main"), ManagedProcess("the helper", error=StartFailed)
    main.start(python("import time; time.sleep(60)"), tmp_path / "main.log")
    other.start(python("print('helper died'); raise SystemExit(5)"), tmp_path / "helper.log")
    try:
        with pytest.raises(StartFailed, match="the helper exited with code 5 at start") as failed:
            main.wait_until_ready(lambda: False, timeout_s=30, what="serve", others=[other])
        assert "helper died" in str(failed.value)
    finally:
        stop_all([main, other], grace_s=10)
    assert not main.running and not other.running


def test_stop_kills_a_child_that_ignores_the_stop_signal(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    ignore = "signal.signal(signal.SIGTERM, lambda *_: print('SIGTERM ignored', flush=True))"
    process = ManagedProcess("the stubborn one")
    process.start(listener(port, ignore), tmp_path / "out.log")
    process.wait_until_ready(lambda: port_open(port), timeout_s=30, what="listen")
    pid = process.pid
    assert pid is not None
    started = time.monotonic()
    process.stop(grace_s=0.5)
    assert time.monotonic() - started >= 0.5
    assert gone(pid)
    assert "SIGTERM ignored" in process.log_tail()


def test_stop_of_a_detached_child_ends_what_it_left_behind(tmp_path: Path) -> None:
    """The grandchild ignores SIGTERM and outlives its parent; the group's SIGKILL ends it."""
    (port,) = free_ports(1)
    spawn = (
        "g = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('grandchild', g.pid, flush=True)"
    )
    process = ManagedProcess("the parent")
    process.start(listener(port, spawn), tmp_path / "out.log")
    process.wait_until_ready(lambda: port_open(port), timeout_s=30, what="listen")
    grandchild = int(process.log_tail().split("grandchild ")[1].split()[0])
    assert not gone(grandchild)
    process.stop(grace_s=10)
    assert eventually(lambda: gone(grandchild))


def test_an_attached_child_gets_the_stop_signal_alone(tmp_path: Path) -> None:
    """Not detached (the embedded broker's way): SIGKILL as its stop signal, no grace."""
    process = ManagedProcess("tansu", detached=False, stop_signal=signal.SIGKILL)
    process.start(
        python(
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
        ),
        tmp_path / "out.log",
    )
    pid = process.pid
    assert pid is not None and process.running
    started = time.monotonic()
    process.stop(grace_s=10)
    assert time.monotonic() - started < 5 and gone(pid)


def test_a_stopped_process_starts_again(tmp_path: Path) -> None:
    process = ManagedProcess("the sleeper")
    log = tmp_path / "out.log"
    for run in ("first", "second"):
        process.start(python(f"import time; print('{run}'); time.sleep(60)"), log)
        assert eventually(lambda run=run: run in process.log_tail())
        process.stop(grace_s=10)
    assert log.read_text().split() == ["first", "second"]  # appended, not replaced


class Listener(Launcher):
    """The smallest launcher: one listening child in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (self.port,) = free_ports(1)
        self.process = ManagedProcess("the listener")

    def start(self) -> Self:
        self.process.start(listener(self.port), self.folder / "out.log")
        self.process.wait_until_ready(lambda: port_open(self.port), timeout_s=30, what="listen")
        return self

    def stop(self) -> None:
        self.process.stop(grace_s=10)


def test_a_launcher_is_a_context_manager(tmp_path: Path) -> None:
    with Listener(tmp_path) as launched:
        assert isinstance(launched, Listener)
        assert port_open(launched.port)
        pid = launched.process.pid
    assert pid is not None and gone(pid)

    with pytest.raises(RuntimeError, match="inside"), Listener(tmp_path) as launched:
        pid = launched.process.pid
        raise RuntimeError("inside")
    assert pid is not None and gone(pid)
