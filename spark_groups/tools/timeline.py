"""A group's timeline for ``spark-groups history``: ledger rows and rebalances in time order.

Who (which member) processed which offset range of which partition, when; catch-ups with the
exactly-once sink; resets; and every assignment, revocation (with how long its barrier
waited, and for which batch) and loss.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from spark_groups.errors import OptionError
from spark_groups.group.history import history_path, read_history
from spark_groups.ledger import CATCH_UP_BATCH, OUTSIDE_BATCH, RESET_BATCH, OffsetLedger
from spark_groups.offsets import TopicPartition


@dataclass(frozen=True)
class TimelineEvent:
    """One line of the timeline.

    ``kind`` is ``batch``, ``catch-up``, ``reset``, ``outside`` (offsets committed by another
    consumer of the group, or a gap an operator accepted), ``assigned``, ``revoked`` or
    ``lost``;
    ``batch`` the batch number (committed batches; for revocations the batch the barrier
    waited for, if any); ``offsets`` the ``[from, until)`` range (resets: old and new
    position); ``barrier_wait_ms`` how long a revocation's barrier held.
    """

    at: datetime
    kind: str
    partition: TopicPartition
    member_id: str
    generation: int
    batch: int | None = None
    offsets: tuple[int, int] | None = None
    barrier_wait_ms: float | None = None

    def describe(self) -> str:
        """A short human description of what happened."""
        if self.kind == "batch":
            lo, hi = self.offsets or (0, 0)
            return f"batch {self.batch}: [{lo}, {hi}) {hi - lo} records"
        if self.kind == "catch-up":
            lo, hi = self.offsets or (0, 0)
            return f"caught up with the sink: [{lo}, {hi})"
        if self.kind == "reset":
            lo, hi = self.offsets or (0, 0)
            return f"position reset {lo} -> {hi}"
        if self.kind == "outside":
            lo, hi = self.offsets or (0, 0)
            return f"committed outside spark_groups: [{lo}, {hi}) by {self.member_id}"
        if self.kind == "revoked":
            if self.barrier_wait_ms is None:
                return "revoked"
            waited = f"revoked; barrier waited {self.barrier_wait_ms:.0f} ms"
            if self.batch is not None and self.batch >= 0:
                waited += f" for batch {self.batch}"
            return waited
        return self.kind


def parse_partition(text: str) -> TopicPartition:
    """``TOPIC:P`` as a partition."""
    topic, sep, number = text.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise OptionError("--partition", f"expected TOPIC:PARTITION, got {text!r}")
    return TopicPartition(topic, int(number))


def timeline(
    ledger_path: str,
    group: str,
    rebalances_path: str | None = None,
    partitions: Iterable[TopicPartition] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> list[TimelineEvent]:
    """The group's events in time order, filtered by partition and ``since <= at < until``;
    with ``limit``, only the newest ``limit`` events. ``rebalances_path`` defaults to the
    ledger's sibling (:func:`~spark_groups.group.history.history_path`); ``storage_options``
    (delta-rs' names) open both tables."""
    wanted = None if partitions is None else set(partitions)
    ledger = OffsetLedger(ledger_path, group, storage_options)
    ledger_rows = ledger.history(wanted, since=since, until=until)
    events = [_from_ledger(row) for row in ledger_rows.to_pylist()]
    rebalances = read_history(rebalances_path or history_path(ledger_path), storage_options)
    rebalances = rebalances.filter(pc.equal(rebalances.column("group_id"), group))
    for row in _filter_time(rebalances, since, until).to_pylist():
        tp = TopicPartition(row["topic"], row["partition"])
        if wanted is None or tp in wanted:
            event = TimelineEvent(
                at=row["at"], kind=row["event"], partition=tp, member_id=row["member_id"],
                generation=row["generation"], batch=row["waited_for_batch"],
                barrier_wait_ms=row["barrier_wait_ms"],
            )  # fmt: skip
            events.append(event)
    # Rebalance events first at equal times: a revocation's barrier precedes the handover.
    ledger_kinds = ("batch", "catch-up", "reset", "outside")
    events.sort(key=lambda e: (e.at, e.kind in ledger_kinds, e.partition))
    if limit is not None:
        events = events[-limit:] if limit > 0 else []
    return events


def _from_ledger(row: dict) -> TimelineEvent:
    batch = row["batch"]
    kind = {CATCH_UP_BATCH: "catch-up", RESET_BATCH: "reset", OUTSIDE_BATCH: "outside"}.get(
        batch, "batch"
    )
    return TimelineEvent(
        at=row["committed_at"], kind=kind,
        partition=TopicPartition(row["topic"], row["partition"]),
        member_id=row["member_id"], generation=row["generation"],
        batch=batch if kind == "batch" else None,
        offsets=(row["from_offset"], row["until_offset"]),
    )  # fmt: skip


def _filter_time(table: pa.Table, since: datetime | None, until: datetime | None) -> pa.Table:
    kind = pa.timestamp("us", tz="UTC")
    if since is not None:
        table = table.filter(pc.greater_equal(table.column("at"), pa.scalar(since, kind)))
    if until is not None:
        table = table.filter(pc.less(table.column("at"), pa.scalar(until, kind)))
    return table
