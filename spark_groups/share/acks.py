"""Acknowledging a share batch's records once the sink's table holds the batch.

A record may be ACCEPTed only by the consumer that acquired it, and only once it is durable.
So a reading task hands its consumer and what it acquired (:class:`Acquired`) to its worker's
:class:`Acknowledger`, whose thread follows the table's commits (:class:`CommitWatch`) and
settles each (:class:`Outcome`): ACCEPTed when a commit names the task attempt (every record
it acquired, also those filtered out or left out as already there); RELEASEd when a commit of
the same run and batch names another attempt; released when no such commit came before the
lock ran out (refused, harmlessly). Then the consumer goes back to its pool, or is closed
when its acknowledgement failed. Records the broker refuses to settle come back with a
higher delivery count; the sink's deduplication keeps them out of the table.
docs/share-groups.md, "Durable before ACCEPT".
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_groups import crash_points
from spark_groups.kafka.share_client import settle
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.sink.share_info import committed_attempts
from spark_groups.spark.task_context import TaskAttempt
from spark_groups.storage.snapshots import LatestSnapshot, commits_after

log = logging.getLogger(__name__)

#: How often the thread looks for new commits while anything waits.
POLL_S = 0.2
#: How long one ``commit_sync`` of acknowledgements may take.
COMMIT_TIMEOUT_S = 30.0
#: How many of the newest outcomes :attr:`Acknowledger.settled` keeps (a worker lives on).
SETTLED_KEPT = 1000


class Outcome(enum.Enum):
    """How one task attempt's records were settled (see the module doc)."""

    ACCEPTED = "accepted"
    RELEASED = "released"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Acquired:
    """What one task attempt acquired on its ``consumer`` (a share consumer of
    ``spark_groups.kafka.share_client`` it no longer uses), and when the first of the locks
    runs out (``expires_at``, ``time.monotonic()``)."""

    attempt: TaskAttempt
    consumer: Any
    records: PartitionOffsets
    expires_at: float
    #: What the consumer's owner wants back with it (a pool's entry), untouched here.
    owner: Any = None


class CommitWatch:
    """The infos of the commits made to the table at ``path`` since the watch began."""

    def __init__(self, path: str, storage_options: Mapping[str, str] | None = None) -> None:
        """Begin at the table's newest version (or at its creation, when there is none)."""
        self._snapshot = LatestSnapshot(path, storage_options)
        self._seen = self._version()

    @property
    def seen(self) -> int:
        """The newest version whose commit :meth:`new_commits` has returned (or skipped)."""
        return self._seen

    def _version(self) -> int:
        with self._snapshot.latest() as table:
            return -1 if table is None else table.version()

    def new_commits(self) -> list[dict[str, Any]]:
        """The infos of the commits since the last call, oldest first."""
        with self._snapshot.latest() as table:
            if table is None:
                return []
            infos = commits_after(table, self._seen)
            self._seen = max(self._seen, table.version())
        return infos


class Acknowledger:
    """Settles the :class:`Acquired` handed to it (module doc), on a thread of its own that
    runs while anything waits. ``on_done(acquired, outcome, acked_at)`` gets each one back,
    settled; ``acked_at``: ``time.monotonic()`` just before its acknowledgement went out."""

    def __init__(
        self,
        watch: CommitWatch,
        on_done: Callable[[Acquired, Outcome, float], None],
        poll_s: float = POLL_S,
    ) -> None:
        """Follow ``watch``; see the class doc."""
        self.watch = watch
        self._on_done = on_done
        self._poll_s = poll_s
        self._waiting: list[Acquired] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: The newest :data:`SETTLED_KEPT` outcomes, per attempt, each noted once its
        #: acknowledgement went out and its consumer was given back (for logs and tests).
        self.settled: OrderedDict[TaskAttempt, Outcome] = OrderedDict()

    def add(self, acquired: Acquired) -> None:
        """Wait for ``acquired``'s batch in the table, then settle it."""
        with self._lock:
            self._waiting.append(acquired)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="spark-groups-share-acks", daemon=True
                )
                self._thread.start()

    def waiting(self) -> list[TaskAttempt]:
        """The attempts not settled yet."""
        with self._lock:
            return [a.attempt for a in self._waiting]

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    self._thread = None
                    return
            try:
                self._settle(self.watch.new_commits())
            except Exception:  # the table could not be read now: the next round tries again
                log.warning("share acknowledgements: cannot read the sink's table", exc_info=True)
            time.sleep(self._poll_s)

    def _settle(self, commits: list[dict[str, Any]]) -> None:
        named = [c for c in (committed_attempts(info) for info in commits) if c is not None]
        now = time.monotonic()
        with self._lock:
            waiting = list(self._waiting)
        for acquired in waiting:
            outcome = _outcome(acquired, named, now)
            if outcome is None:
                continue
            with self._lock:
                self._waiting.remove(acquired)
            if outcome is Outcome.ACCEPTED:
                crash_points.reached("share.accepting")
            acked_at = time.monotonic()
            try:
                _acknowledge(acquired, outcome)
            except Exception:  # its state is unknown now: closing it releases what it holds
                log.exception("%s: could not acknowledge; closing its consumer", acquired.attempt)
                with contextlib.suppress(Exception):
                    acquired.consumer.close()
            else:
                self._on_done(acquired, outcome, acked_at)
            self._note_settled(acquired.attempt, outcome)

    def _note_settled(self, attempt: TaskAttempt, outcome: Outcome) -> None:
        """Keep ``outcome`` in :attr:`settled` (once its acknowledgement went out and its
        consumer was given back)."""
        self.settled[attempt] = outcome
        while len(self.settled) > SETTLED_KEPT:
            self.settled.popitem(last=False)


def _outcome(
    acquired: Acquired, named: list[tuple[str, int, frozenset[int]]], now: float
) -> Outcome | None:
    attempt = acquired.attempt
    for run_id, batch_id, attempts in named:
        if (run_id, batch_id) == (attempt.run_id, attempt.batch_id):
            return Outcome.ACCEPTED if attempt.attempt_id in attempts else Outcome.RELEASED
    return Outcome.EXPIRED if now >= acquired.expires_at else None


def _acknowledge(acquired: Acquired, outcome: Outcome) -> None:
    """ACCEPT or RELEASE every record of ``acquired`` and commit that to the broker."""
    records = (
        (tp.topic, tp.partition, offset)
        for tp, offsets in acquired.records.items()
        for offset in offsets
    )
    refused = settle(acquired.consumer, records, outcome is Outcome.ACCEPTED, COMMIT_TIMEOUT_S)
    log.log(
        logging.WARNING if refused and outcome is Outcome.ACCEPTED else logging.INFO,
        "%s: %s %d record(s)%s",
        acquired.attempt,
        outcome.value,
        acquired.records.records(),
        f"; the broker refused them in {refused} (their lock ran out: they come back, and "
        "the sink keeps them out of the table)"
        if refused
        else "",
    )
