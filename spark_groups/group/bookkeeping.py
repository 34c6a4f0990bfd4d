"""What the driver's parts share: the partitions' states, the batches planned, one lock.

Two threads touch it: Spark's (``latestOffset``: plan, safe-point commit) and the group
member's owner thread (assignment changes, the revocation barrier). Every read and write
happens under :attr:`Bookkeeping.lock`; the parts that use it (``commit``, ``barrier``,
``arrivals``) take the lock themselves and never call out (to Kafka, to the ledger) while
holding it.

:class:`PlannedBatches` is the batch-level half: the batches this process planned and has not
committed yet (the barrier commits from them), when each was planned (replays and slow-batch
warnings), and the highest batch number seen.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from spark_groups.group.partitions import PartitionTable
from spark_groups.offsets import BatchOffset, TopicPartition


class PlannedBatches:
    """The batches planned in this process and how far their commits have come.

    Transitions: :meth:`saw` (a batch number Spark mentioned), :meth:`add` (planned here),
    :meth:`finished` (Spark finished every batch through one), :meth:`committed` (committed
    through a batch: earlier ones are dropped).
    Not thread-safe: callers hold :attr:`Bookkeeping.lock`.
    """

    def __init__(self) -> None:
        #: The highest batch committed here (-1: none).
        self.committed_through = -1
        #: The highest batch number this stream has seen (planned, or started from).
        self.highest = -1
        #: The highest batch Spark has finished, as far as this process knows (-1: none).
        self.finished_through = -1
        #: When the last batch was planned (``time.monotonic()``), None before the first.
        self.last_planned_at: float | None = None
        self._pending: dict[int, BatchOffset] = {}
        self._planned_at: dict[int, float] = {}

    def saw(self, batch: int) -> None:
        """Spark started from (or planned) ``batch``."""
        self.highest = max(self.highest, batch)

    def finished(self, batch: int) -> None:
        """Spark finished every batch through ``batch``: it asks for the next one with
        ``latestOffset(start)``, ``start`` being ``batch``'s end, only after ``batch``'s
        entry in its commit log (the safe point's premise, ``group.commit``)."""
        self.saw(batch)
        self.finished_through = max(self.finished_through, batch)

    def add(self, batch: BatchOffset) -> None:
        """``batch`` was planned here, now."""
        self.saw(batch.batch)
        self._pending[batch.batch] = batch
        self._planned_at[batch.batch] = self.last_planned_at = time.monotonic()

    def get(self, batch: int) -> BatchOffset | None:
        """The uncommitted batch ``batch`` as planned here, if it is one."""
        return self._pending.get(batch)

    def pending(self) -> list[BatchOffset]:
        """The batches planned here and not committed yet, oldest first."""
        return [b for n, b in sorted(self._pending.items()) if n > self.committed_through]

    def committed(self, batch: int) -> None:
        """Every batch up to ``batch`` is committed."""
        self.committed_through = max(self.committed_through, batch)
        for done in [n for n in self._pending if n <= batch]:
            del self._pending[done]

    def planned_here(self, batch: int) -> bool:
        """True when this process planned ``batch`` and has not timed its commit yet."""
        return batch in self._planned_at

    def took(self, batch: int) -> float | None:
        """Seconds from planning ``batch`` to now (asked once, at its commit); None when it
        was not planned here."""
        planned = self._planned_at.pop(batch, None)
        return None if planned is None else time.monotonic() - planned


@dataclass
class Bookkeeping:
    """The state the driver's parts share, guarded by :attr:`lock` (a condition: commits
    notify the revocation barrier)."""

    lock: threading.Condition = field(default_factory=threading.Condition)
    partitions: PartitionTable = field(default_factory=PartitionTable)
    batches: PlannedBatches = field(default_factory=PlannedBatches)
    #: The log ends the last plan saw (before AvailableNow's targets cut them).
    log_ends: dict[TopicPartition, int] = field(default_factory=dict)
    #: Set once the stream is stopping: waits give up.
    stopped: bool = False
