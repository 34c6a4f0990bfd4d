"""A child process that a launcher runs: its output in a log file, waited for, then stopped.

The launchers of the brokers, the S3 server, the tests' Spark daemons and member processes
share this part (:class:`ManagedProcess`, :class:`Launcher`); what they start and how they
know it serves stays theirs. A *detached* process (the default) runs in a session of its own,
so a Ctrl-C in a terminal reaches the launcher and not it; its signals go to its whole process
group, and Linux ends it when the thread that started it ends (``PR_SET_PDEATHSIG``), so a run
killed from outside leaves nothing behind. Stopping is its stop signal, then SIGKILL after a
grace period.

    process = ManagedProcess("the server", error=RuntimeError)
    process.start(command, folder / "server.log")
    process.wait_until_ready(lambda: port_open(port), timeout_s=60, what=f"listen on {port}")
    process.stop(grace_s=20)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from spark_groups.errors import SparkGroupsError

#: How much of a log's end an error shows.
TAIL_CHARS = 4000


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that nothing listens on right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts a TCP connection on 127.0.0.1:``port`` (a plain connect:
    a client library would log or retry every refused connection)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def java(who: str = "Apache Kafka") -> str:
    """The ``java`` to run ``who`` with: ``$JAVA_HOME/bin/java``, else the one on the
    ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        raise SparkGroupsError(
            f"{who} needs Java 17 or newer, and no `java` was found: "
            "apt-get install openjdk-17-jre-headless (or set JAVA_HOME)"
        )
    return found


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to send SIGTERM when the thread that started the
    process ends (start processes from a thread that outlives them, as the main thread does),
    so a run killed from outside leaves no process behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: stop() is the only way out
        pass


class ManagedProcess:
    """One child process of a launcher, with its output (stdout and stderr) appended to a log
    file; it can be started again after :meth:`stop`.

    ``name`` begins its errors' messages (``"Apache Kafka"``), which are of type ``error``;
    ``stop_signal`` asks it to end (SIGTERM; SIGKILL for a program that ignores SIGTERM);
    ``detached``: see the module's docstring.
    """

    def __init__(
        self,
        name: str,
        *,
        error: type[Exception] = RuntimeError,
        detached: bool = True,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.error = error
        self.detached = detached
        self.stop_signal = stop_signal
        self.log_path: Path | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id while started (until :meth:`stop`), else None."""
        return None if self._popen is None else self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once it has ended by itself (until :meth:`stop`), else None."""
        return None if self._popen is None else self._popen.poll()

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._popen is not None and self._popen.poll() is None

    def start(
        self,
        command: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Run ``command``, its output appended to ``log_path``; returns at once (see
        :meth:`wait_until_ready`)."""
        self.log_path = log_path
        with log_path.open("ab") as out:
            self._popen = subprocess.Popen(
                list(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
                cwd=cwd,
                start_new_session=self.detached,
                preexec_fn=_die_with_parent if self.detached else None,
            )

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the process (to its process group when detached); nothing when it
        is not running."""
        if self.running:
            assert self._popen is not None
            if self.detached:
                os.killpg(self._popen.pid, sig)
            else:
                self._popen.send_signal(sig)

    def log_tail(self, chars: int = TAIL_CHARS) -> str:
        """The end of the log (about ``chars`` characters), for failure messages."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with self.log_path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - chars))
            return log.read().decode(errors="replace")

    def failure(self, problem: str, others: Sequence[ManagedProcess] = ()) -> Exception:
        """An error saying ``"<name> <problem>"``, followed by the end of this process's log
        and of each of ``others``'."""
        logs = "".join(f"\n--- the end of {p.log_path}:\n{p.log_tail()}" for p in (self, *others))
        return self.error(f"{self.name} {problem}{logs}")

    def wait_until_ready(
        self,
        ready: Callable[[], bool],
        *,
        timeout_s: float,
        what: str,
        poll_s: float = 0.2,
        others: Sequence[ManagedProcess] = (),
    ) -> None:
        """Ask ``ready()`` every ``poll_s`` until it is true. Raises :meth:`failure` when this
        process or one of ``others`` exits first (``"... exited with code N at start"``), or
        when ``timeout_s`` passes (``"<name> did not <what> within N s"``); an error of
        ``ready`` itself goes through. The process is left as it is: stop it."""
        deadline = time.monotonic() + timeout_s
        while True:
            for process in (self, *others):
                if not process.running:
                    raise process.failure(f"exited with code {process.returncode} at start")
            if ready():
                return
            if time.monotonic() > deadline:
                raise self.failure(f"did not {what} within {timeout_s:.0f} s", others)
            time.sleep(poll_s)

    def stop(self, grace_s: float) -> None:
        """Send the stop signal, wait up to ``grace_s`` and SIGKILL it if it has not ended
        (see :func:`stop_all`); nothing when it was never started."""
        stop_all([self], grace_s)


def stop_all(processes: Sequence[ManagedProcess], grace_s: float) -> None:
    """Stop ``processes``: the stop signal to each in turn first, then wait for each up to
    ``grace_s`` and SIGKILL what is still there. A detached process's group is SIGKILLed once
    it has ended, for what it started and left behind."""
    started = [p for p in processes if p._popen is not None]
    for process in started:
        process.send_signal(process.stop_signal)
    for process in started:
        popen, process._popen = process._popen, None
        assert popen is not None
        try:
            popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _kill(popen, process.detached)
            popen.wait(timeout=10)
        if process.detached:
            _kill(popen, detached=True)


def _kill(popen: subprocess.Popen[bytes], detached: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
        if detached:
            os.killpg(popen.pid, signal.SIGKILL)
        else:
            popen.kill()


class Launcher:
    """A launcher: :meth:`start` and :meth:`stop`, and a context manager that starts on entry
    and stops on exit."""

    def start(self) -> Self:
        """Start what this launcher runs and return once it serves."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop what this launcher runs."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
