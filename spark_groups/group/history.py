"""The rebalance history: every assignment, revocation and loss, in a Delta table.

One row per partition per event, so "why did partition 3 move at 02:14?" is a filter away::

    group_id, event ("assigned" | "revoked" | "lost"), topic, partition, generation,
    member_id, at, barrier_wait_ms (revocations: how long the barrier held),
    waited_for_batch (revocations: the batch the barrier waited for, -1 if none)

Events happen on the group member's thread, inside rebalance callbacks, where slow I/O
would stretch the rebalance; so they are queued in memory (and logged at once) and written
by :meth:`RebalanceHistory.flush`, which the driver calls at each micro-batch and on stop.
The table is the ledger's sibling: ``<offsets.table>_rebalances`` unless set explicitly
(:func:`spark_groups.options.history_path`, the option's default; importable from here too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

import pyarrow as pa

from spark_groups.errors import LedgerError
from spark_groups.offsets import TopicPartition
from spark_groups.options import history_path as history_path
from spark_groups.storage.delta import append, open_table, query, sql_string, sql_timestamp

log = logging.getLogger(__name__)

#: How often (at most) :meth:`RebalanceHistory.flush` applies the retention.
EXPIRE_EVERY_S = 3600.0

#: What happened to a member's partitions.
Event = Literal["assigned", "revoked", "lost"]
EVENTS: tuple[Event, ...] = get_args(Event)

HISTORY_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("generation", pa.int32(), nullable=False),
        pa.field("member_id", pa.string(), nullable=False),
        pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("barrier_wait_ms", pa.float64(), nullable=True),
        pa.field("waited_for_batch", pa.int64(), nullable=True),
    ]
)


@dataclass(frozen=True)
class RebalanceEvent:
    """One assignment change of one member."""

    event: Event
    partitions: frozenset[TopicPartition]
    generation: int
    member_id: str
    at: datetime
    barrier_wait_ms: float | None = None
    waited_for_batch: int | None = None


class RebalanceHistory:
    """Queue rebalance events and append them to a Delta table in batches."""

    def __init__(
        self,
        path: str,
        group_id: str,
        storage_options: Mapping[str, str] | None = None,
        retention: timedelta | None = None,
    ) -> None:
        self.path = path
        self.group_id = group_id
        self.storage_options = dict(storage_options) if storage_options else None
        #: Events older than this are deleted (at most once an hour, after a flush).
        self.retention = retention
        self._expired_at: float | None = None
        self._pending: list[RebalanceEvent] = []
        self._lock = threading.Lock()

    def record(
        self,
        event: Event,
        partitions: Iterable[TopicPartition],
        generation: int,
        member_id: str,
        barrier_wait_ms: float | None = None,
        waited_for_batch: int | None = None,
    ) -> None:
        """Queue one event (cheap; safe from rebalance callbacks)."""
        if event not in EVENTS:
            raise ValueError(f"unknown rebalance event {event!r}")
        parts = frozenset(partitions)
        if not parts:
            return
        item = RebalanceEvent(
            event, parts, generation, member_id, datetime.now(UTC),
            barrier_wait_ms, waited_for_batch,
        )  # fmt: skip
        with self._lock:
            self._pending.append(item)

    def flush(self) -> int:
        """Append the queued events (one Delta commit); returns how many rows were written.

        A failure is logged and the events are kept for the next flush: the history must
        never stop the stream.
        """
        with self._lock:
            events, self._pending = self._pending, []
        if not events:
            return 0
        rows = [
            {
                "group_id": self.group_id,
                "event": e.event,
                "topic": tp.topic,
                "partition": tp.partition,
                "generation": e.generation,
                "member_id": e.member_id,
                "at": e.at,
                "barrier_wait_ms": e.barrier_wait_ms,
                "waited_for_batch": e.waited_for_batch,
            }
            for e in events
            for tp in sorted(e.partitions)
        ]
        try:
            append(
                self.path,
                pa.Table.from_pylist(rows, HISTORY_SCHEMA),
                self.storage_options,
            )
        except Exception as exc:  # keep streaming; retry with the next flush
            log.warning("could not write %d rebalance events to %s: %s", len(rows), self.path, exc)
            with self._lock:
                self._pending = events + self._pending
            return 0
        if self.retention and (
            self._expired_at is None or time.monotonic() - self._expired_at > EXPIRE_EVERY_S
        ):
            self._expired_at = time.monotonic()
            self.expire(datetime.now(UTC) - self.retention)
        return len(rows)

    def expire(self, cutoff: datetime) -> int:
        """Delete this group's events before ``cutoff`` (timezone-aware); return how many.
        A failure is logged and deletes nothing."""
        try:
            table = open_table(self.path, self.storage_options)
            if table is None:
                return 0
            metrics = table.delete(
                f'"group_id" = {sql_string(self.group_id)} AND "at" < {sql_timestamp(cutoff)}'
            )
        except Exception as exc:
            log.warning("rebalance history %s: retention skipped this time: %s", self.path, exc)
            return 0
        deleted = int(metrics.get("num_deleted_rows", 0) or 0)
        if deleted:
            log.info("rebalance history %s: deleted %d event row(s)", self.path, deleted)
        return deleted


def read_history(path: str, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """All rows of a rebalance-history table, oldest first (empty when it does not exist)."""
    try:
        table = open_table(path, storage_options)
    except Exception as exc:
        raise LedgerError(
            f"{path}: cannot read the rebalance history: {exc}", path=str(path)
        ) from exc
    if table is None:
        return HISTORY_SCHEMA.empty_table()
    return query(table, "h", "SELECT * FROM h ORDER BY at, topic, partition").cast(HISTORY_SCHEMA)
