"""The one launcher of member processes: a program (``support/programs/``) in a process of
its own, started, signalled, waited for and cleared up, on the product's
:class:`~spark_groups.tools.processes.ManagedProcess`.

A member differs from the servers ManagedProcess's other launchers run in what a test looks
at: not whether it serves, but how it ends (its exit code, kept after it exited), what it
logged (every run's log, ``logs/NAME-RUN.log``) and which of its processes are left (its
process group: the program, Spark's JVM and Python workers, the source's reader process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from spark_groups.tools.checkout import package_checkout
from spark_groups.tools.processes import ManagedProcess

#: The repository root: where members run, as the tests do (an installed spark_groups finds
#: the fetched jars there, in ``.cache/``).
ROOT = Path(__file__).resolve().parents[2]
#: The member programs.
PROGRAMS = Path(__file__).with_name("programs")


def member_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A member's environment: this process's, spark_groups logging at INFO, and the
    checkout this spark_groups runs from (an editable install) first on ``PYTHONPATH``, so
    the member, its JVM's Python workers and its reader process run the same package as the
    test; an installed one (the lanes of ``.ci/run``) adds nothing. ``extra`` wins."""
    checkout = package_checkout()
    path = [str(checkout)] if checkout else []
    path += [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env = dict(os.environ, SPARK_GROUPS_LOG_LEVEL="INFO")
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    env.update(extra or {})
    return env


class MemberProcess:
    """``python PROGRAM ARGS`` in a session of its own (a signal reaches its whole process
    group), from :data:`ROOT`, its output in ``logs/NAME-RUN.log``; it can be started again
    once it has ended (run 1, 2, ...). The arguments are :meth:`arguments`' at each start,
    and never written to the log (a test's may hold a secret)."""

    def __init__(self, name: str, program: Path, logs: Path, args: Sequence[str] = ()) -> None:
        self.name, self.program, self.logs, self.args = name, program, logs, list(args)
        self.runs = 0
        self._process = ManagedProcess(f"member {name} ({program.name})", error=AssertionError)

    def arguments(self) -> list[str]:
        """The program's arguments for the next run: ``args`` (a subclass makes its own)."""
        return self.args

    @property
    def running(self) -> bool:
        """The program was started and has not exited."""
        return self._process.running

    @property
    def returncode(self) -> int | None:
        """The last run's exit code (``-N``: signal N) once it has ended, else None."""
        return self._process.returncode

    @property
    def pid(self) -> int | None:
        """The last run's process id (its process group's too), None before the first."""
        return self._process.pid

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the program (again); ``env`` adds to its environment (:func:`member_env`:
        e.g. a crash point's)."""
        assert not self.running, f"{self.name} is running"
        self.runs += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{self.name}-{self.runs}.log"
        self._process.start(self.command(), log, env=member_env(env), cwd=ROOT)

    def command(self) -> list[str]:
        """What the next run executes: ``python PROGRAM ARGS`` (:meth:`arguments`)."""
        return [sys.executable, str(self.program), *self.arguments()]

    def wait(self, timeout_s: float) -> int:
        """Wait for the program to exit; its exit code. :class:`AssertionError` with the end
        of its log when it has not exited within ``timeout_s``."""
        assert self.runs, f"{self.name} was never started"
        deadline = time.monotonic() + timeout_s
        while self.running:
            if time.monotonic() > deadline:
                raise self._process.failure(f"did not exit within {timeout_s:g} s")
            time.sleep(0.1)
        code = self.returncode
        assert code is not None
        return code

    def run(self, timeout_s: float, env: Mapping[str, str] | None = None) -> int:
        """Start the program, wait for it to exit and SIGKILL whatever is left of its process
        group (whether it exited or not); its exit code."""
        self.start(env)
        try:
            return self.wait(timeout_s)
        finally:
            self.kill()
            self.reap()

    def line(self, prefix: str, timeout_s: float = 60.0) -> str:
        """The first line of this run's output that starts with ``prefix``, waited for;
        :class:`AssertionError` when the program exits or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.last_log()
            found = [x for x in text.splitlines() if x.startswith(prefix)]
            if found:
                return found[0]
            if not self.running:
                raise self._process.failure(f"exited ({self.returncode}) before {prefix!r}")
            if time.monotonic() > deadline:
                raise self._process.failure(f"printed no {prefix!r} within {timeout_s:g} s")
            time.sleep(0.05)

    def signal(self, sig: int, *, group: bool = True) -> None:
        """Send ``sig`` to the whole process group, or (``group=False``) to the program alone,
        as an orchestrator stopping a driver does; nothing when the program is not running."""
        if group:
            self._process.send_signal(sig)
        elif self.running:
            assert self.pid is not None
            os.kill(self.pid, sig)

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the whole process group, and wait for the program to exit."""
        if self.running:
            self.signal(signal.SIGKILL)
            self.wait(timeout_s)

    def terminate(self, timeout_s: float = 120.0) -> float:
        """SIGTERM the whole process group, as a deployment stops a member; wait for the
        program to exit, then for the rest of its group (:meth:`wait_group_gone`). Returns
        the seconds until the program exited."""
        started = time.monotonic()
        self.signal(signal.SIGTERM)
        self.wait(timeout_s)
        exited = time.monotonic() - started
        self.wait_group_gone(timeout_s)
        return exited

    def wait_group_gone(self, timeout_s: float) -> None:
        """Wait until no process of the group is left (the reader process leaving the group
        may outlive the program); SIGKILL them past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._group_left():
            time.sleep(0.1)
        self.reap()

    def _group_left(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def reap(self) -> None:
        """SIGKILL whatever is left of the process group (after the program exited: what it
        started and left behind)."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def last_log(self) -> str:
        """The last run's output so far ("" before the first)."""
        log = self._process.log_path
        return log.read_text(errors="replace") if log and log.exists() else ""

    def log_text(self) -> str:
        """Every run's output, oldest first."""
        logs = (self.logs / f"{self.name}-{run}.log" for run in range(1, self.runs + 1))
        return "".join(p.read_text(errors="replace") for p in logs if p.exists())
