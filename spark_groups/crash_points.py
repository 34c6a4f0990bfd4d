"""Named crash points of a batch's life, for tests that stop a member exactly there.

:data:`POINTS` are a ``kafka-group`` batch's, in order; :data:`SHARE_POINTS` those a
``kafka-share`` batch reaches after ``spark.commit_log`` (in its reading tasks' workers);
:data:`GROUP_POINTS` a partition's arrival. What each means: docs/guarantees.md, "Crash
points". Every point is inert unless a test turns it on: in-process, :func:`installed` runs a
hook at every point reached; across processes, :data:`CRASH_ENV` = ``point:SIGKILL`` (or
``SIGTERM``) stops the member at the first process that reaches ``point`` once the arm file
named by :data:`ARM_ENV` exists (no such variable: armed from the start). SIGKILL goes to
every process of the member's session, SIGTERM to the session leader's process group,
``point:SIGKILL:process`` to the reaching process alone. The first process to fire renames the
arm file to ``<arm>.fired`` (one firing) and writes the point and its pid into it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

#: Every point, in the order of a batch's life.
POINTS = (
    "planned",
    "read",
    "sink.files_written",
    "sink.commit_in_flight",
    "sink.committed",
    "spark.commit_log",
    "kafka.committed",
    "ledger.written",
    "revocation",
    "leave",
)
#: Points of a partition's arrival, outside a batch's life.
GROUP_POINTS = ("resuming",)
#: Points of a ``kafka-share`` batch's life besides those of :data:`POINTS` it reaches.
SHARE_POINTS = ("share.dead_letters", "share.accepting")
#: ``point:SIGNAL``: the point where a member started by a test stops, and how.
CRASH_ENV = "SPARK_GROUPS_CRASH_AT"
#: The arm file: the crash point fires only once it exists.
ARM_ENV = "SPARK_GROUPS_CRASH_ARM"

_hook: Callable[[str], None] | None = None


def reached(point: str) -> None:
    """The caller is at ``point`` (one of :data:`POINTS`, :data:`GROUP_POINTS` or
    :data:`SHARE_POINTS`): stop here if a test asked to."""
    if _hook is not None:
        _hook(point)
        return
    wanted = os.environ.get(CRASH_ENV)
    if not wanted or not wanted.startswith(point + ":"):
        return
    _, name, *scope = wanted.split(":")
    sig = getattr(signal, name)
    arm = os.environ.get(ARM_ENV)
    if arm:
        try:
            os.rename(arm, arm + ".fired")
        except OSError:
            return  # not armed yet, or another process fired
        with open(arm + ".fired", "w") as f:
            f.write(f"{point} {os.getpid()}\n")
    if scope == ["process"]:
        os.kill(os.getpid(), sig)
        return
    session = os.getsid(0)
    if sig != signal.SIGKILL:
        os.killpg(session, sig)
        return
    me = os.getpid()
    for pid in _session_pids(session):
        if pid != me:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    os.kill(me, sig)


def _session_pids(session: int) -> list[int]:
    """Every process of ``session`` (Linux: from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == session:  # state, ppid, pgrp, session
            out.append(int(entry))
    return out


@contextlib.contextmanager
def installed(hook: Callable[[str], None]) -> Iterator[None]:
    """Run ``hook(point)`` at every point reached in this process while in the block."""
    global _hook
    before, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = before
