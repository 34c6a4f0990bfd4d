"""The driver's state, and the one thread that may touch it.

:class:`DriverState` holds what the driver knows: every owned partition's state
(``group.partitions``), the batches planned here and not committed yet, the log ends the
last plan saw, the released partitions whose positions are still on their way to Kafka, and
whether the stream has stopped. Only the group member's owner thread reads or writes it:
librdkafka's callbacks run there, and every other thread (Spark's, the one SIGTERM starts)
hands it a request through :class:`OnOwner` and waits for the answer. A request never polls
the consumer, so no rebalance callback runs inside one; a revocation's barrier runs requests
while it waits (``OwnerThread.serve``), each to its end. So no lock guards this state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from spark_groups.group.partitions import PartitionTable
from spark_groups.offsets import BatchOffset, TopicPartition

if TYPE_CHECKING:
    from spark_groups.group.member import GroupMember

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


class PlannedBatches:
    """The batches planned in this process and how far their commits have come.

    Transitions: :meth:`saw` (a batch number Spark mentioned), :meth:`add` (planned here),
    :meth:`finished` (Spark finished every batch through one), :meth:`committed` (committed
    through a batch: earlier ones are dropped)."""

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
        """Spark finished every batch through ``batch`` (it asked for the next one)."""
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
class DriverState:
    """What the driver knows; the member's owner thread alone touches it (module doc)."""

    partitions: PartitionTable = field(default_factory=PartitionTable)
    batches: PlannedBatches = field(default_factory=PlannedBatches)
    #: The log ends the last plan saw (before AvailableNow's targets cut them).
    log_ends: dict[TopicPartition, int] = field(default_factory=dict)
    #: Released partitions whose table positions were refused by Kafka for a generation a
    #: rebalance moved past: committed again by the releasing thread under the new one, or by
    #: a revocation of them (``group.claims``).
    releasing: dict[TopicPartition, int] = field(default_factory=dict)
    #: Set once the stream is stopping: a revocation's wait gives up.
    stopped: bool = False


class OnOwner:
    """Runs a function on the group member's owner thread and returns its answer.

    Before the member exists, on the owner thread itself and once the member is closing, it
    runs the function at once: a closing member's callbacks leave the state alone, and the
    stream has stopped. ``timeout_s`` bounds a request queued behind a slow one (a
    revocation's wait runs them as it waits)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.member: GroupMember | None = None

    def __call__(self, request: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``request(*args, **kwargs)`` on the owner thread; its answer, or its exception."""
        member = self.member
        if member is None or member.closing or member.on_owner_thread():
            return request(*args, **kwargs)
        return member.call(lambda _consumer: request(*args, **kwargs), self.timeout_s)
