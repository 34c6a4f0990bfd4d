"""Named crash points of a batch's life, for tests that stop a member exactly there.

A batch of a ``kafka-group`` query goes through these points, in this order (some in the
reader process on the driver, some in the sink's commit, some on executors):

==========================  ==========================================================
point                       reached
==========================  ==========================================================
``planned``                 the source planned the batch (``latestOffset`` returns it)
``read``                    an executor task read its ranges
``sink.files_written``      the ``delta-group`` sink's driver got every task's files
``sink.commit_in_flight``   the sink decided and is about to commit to Delta
``sink.committed``          the sink's Delta commit landed
``spark.commit_log``        Spark wrote its commit log and asked for the next batch
``kafka.committed``         the source committed the batch to Kafka
``ledger.written``          the source wrote the batch's ledger rows
``revocation``              the group takes partitions away (the barrier starts)
``leave``                   the member committed what it could and is about to leave
==========================  ==========================================================

A batch of a ``kafka-share`` query reaches ``planned``, ``read`` (a task acquired records and
handed them to its worker's acknowledger), the three ``sink.*`` points and
``spark.commit_log``, and then, in each reading task's Python worker:

==========================  ==========================================================
``share.dead_letters``      a task wrote the records on their last delivery to the
                            dead-letter table; their REJECT is about to go (in the task)
``share.accepting``         the table names the task attempt; its ACCEPT is about to go
==========================  ==========================================================

One point belongs to a partition's arrival rather than to a batch (:data:`GROUP_POINTS`):

==========================  ==========================================================
``resuming``                the source is about to find where newly assigned partitions
                            resume (Kafka, the ledger, and with ``sink.table`` their
                            claim in the sink's table); the group may revoke them meanwhile
==========================  ==========================================================

Every point is inert unless a test turns it on, in one of two ways:

* in-process: :func:`installed` runs a function at every point reached;
* across processes (a member started by a test in a session of its own): the environment
  variable :data:`CRASH_ENV` = ``point:SIGKILL`` (or ``SIGTERM``) makes the first process
  of the member that reaches ``point`` stop the member, once the *arm file* named by
  :data:`ARM_ENV` exists (no arm file variable: armed from the start). SIGKILL goes to every
  process of the session (the driver, the JVM, the reader process and pyspark's daemon and
  workers, which sit in a process group of their own): the member dies at once, whole.
  SIGTERM goes to the session leader's process group, as a deployment stops a member (the
  driver and the JVM, whose shutdown then ends the Python workers). The first process to
  fire renames the arm file to ``<arm>.fired`` (atomic: one firing) and writes the point
  and its pid into it. A test arms a member when it has seen what it waits for (say, two
  committed batches): no sleep decides which batch is hit. ``point:SIGKILL:process`` kills
  only the process that reaches the point (one Python worker of an executor: a task's
  process dies, the member lives on).
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
