"""One reading task of a ``kafka-share`` batch: poll a share consumer, hand its records over.

The task takes a share consumer of its worker (``share.consumers``), polls until one poll
acquires records or ``poll_budget_s`` has passed, and yields them as one Arrow batch (the
kafka source's columns plus ``deliveryCount``). Before yielding, it hands the consumer and
what it acquired to the sink table's acknowledger (``share.acks``): whatever happens to the
task after that, the records are settled. Their lock is counted from just before the poll, or
from the consumer's earlier exposure (``PooledShareConsumer``), less ``lock_margin_s``, so an
acknowledgement never goes out after the broker gave the records to someone else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from spark_groups import crash_points
from spark_groups.errors import SparkGroupsError
from spark_groups.formats import bad_records
from spark_groups.formats.decoder import DecodePlan
from spark_groups.kafka.share_client import acknowledge
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.read.schema import arrow_schema
from spark_groups.share import consumers, dead_letters
from spark_groups.share.acks import COMMIT_TIMEOUT_S, Acquired
from spark_groups.spark.task_context import TaskAttempt, note_read

log = logging.getLogger(__name__)

#: The column a share batch adds to the kafka source's: how often the broker has delivered
#: the record, this time included.
DELIVERY_COUNT = "deliveryCount"


def share_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of a share task's batches."""
    return arrow_schema(include_headers).append(pa.field(DELIVERY_COUNT, pa.int32()))


@dataclass(frozen=True)
class ShareTask:
    """What one reading task needs (pickled to the executor)."""

    #: The share consumer's configuration (``group.id``, ``bootstrap.servers``, ...).
    config: Mapping[str, Any]
    topics: list[str]
    #: The sink's table, whose commits say when the records may be ACCEPTed.
    table: str
    poll_budget_s: float
    #: The group's ``share.record.lock.duration.ms``, in seconds.
    lock_s: float = 30.0
    lock_margin_s: float = 5.0
    include_headers: bool = False
    storage_options: Mapping[str, str] = field(default_factory=dict)
    #: The group's ``share.delivery.count.limit``: the delivery on which a record is given
    #: out for the last time.
    delivery_limit: int = 5
    #: Where records on their last delivery go (``share.dead_letters``; None: into the batch),
    #: and those that cannot be decoded (None: the task fails at the first).
    dead_letter_table: str | None = None
    #: How the key and value are decoded (None: they stay bytes).
    decode: DecodePlan | None = None

    def arrow_schema(self) -> pa.Schema:
        """The schema of the task's batches (decoded columns in their types)."""
        base = share_arrow_schema(self.include_headers)
        return base if self.decode is None else self.decode.row_schema(base)


def read_share_task(task: ShareTask, attempt: TaskAttempt | None) -> Iterator[pa.RecordBatch]:
    """Poll, hand over, yield (module doc). ``attempt``: this task attempt's name
    (:meth:`TaskAttempt.current` in Spark)."""
    if attempt is None:
        raise SparkGroupsError(
            "kafka-share: this read runs outside a streaming batch's task (no batch id or run "
            "id in the TaskContext); read a share group with spark.readStream only"
        )
    entry = consumers.checkout(task.config, task.topics)
    records: list[Any] = []
    deadline = time.monotonic() + task.poll_budget_s
    try:
        # One poll that acquires: explicit acknowledgement refuses the next poll until every
        # record of the last is acknowledged (IllegalStateException).
        while not records:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            started = time.monotonic()
            records = [m for m in entry.consumer.poll(min(left, 0.5)) if m.error() is None]
            if not records:  # a fetch it left open may still acquire records for its buffer
                entry.exposed(started)
        records = _without_last_deliveries(task, entry, records)
        batch = _batch(records, task.include_headers)
        if task.decode is not None and records:
            batch, records = _decoded(task, entry, batch, records)
    except BaseException:
        consumers.close_quietly(entry)  # closing releases whatever it acquired
        raise
    note_read(attempt, len(records))  # for the writer of this task (``take_read_note``)
    if not records:
        consumers.checkin(entry)
        yield pa.RecordBatch.from_pylist([], schema=task.arrow_schema())
        return
    offsets = PartitionOffsets.of(
        (TopicPartition(m.topic(), m.partition()), m.offset()) for m in records
    )
    # The records may have waited in the consumer's buffer since it was last exposed.
    locked_since = min(started, entry.exposed_since or started)
    entry.exposed_since = None  # drained: only its acknowledgement exposes it again
    expires_at = locked_since + task.lock_s - task.lock_margin_s
    acks = consumers.acknowledger(task.table, task.storage_options)
    acks.add(Acquired(attempt, entry.consumer, offsets, expires_at, owner=entry))
    crash_points.reached("read")
    yield batch


def _without_last_deliveries(
    task: ShareTask, entry: consumers.PooledShareConsumer, records: list[Any]
) -> list[Any]:
    """``records`` less those on their last delivery, which are settled here
    (``share.dead_letters``, its steps); all of them without a dead-letter table, or when
    writing it failed (logged)."""
    others, last = dead_letters.last_deliveries(records, task.delivery_limit)  # 1
    if not last:
        return records
    group = str(task.config.get("group.id", ""))
    if task.dead_letter_table is None:
        log.warning(
            "share group %s: %d record(s) on their last delivery (share.delivery.count.limit "
            "%d): %s. Read into this batch; if it fails too, the broker archives them. Set "
            "the source option deadLetter.table to keep them in a table of their own",
            group, len(last), task.delivery_limit, dead_letters.describe(last),
        )  # fmt: skip
        return records
    try:
        landed, dead = dead_letters.landed(task.table, last, task.storage_options)  # 2
        if dead:
            dead_letters.write(  # 3
                task.dead_letter_table, dead, group, task.delivery_limit, task.storage_options
            )
    except Exception:
        log.exception(
            "share group %s: could not write %d record(s) on their last delivery to the "
            "dead-letter table %s (%s); reading them into this batch instead",
            group, len(last), task.dead_letter_table, dead_letters.describe(last),
        )  # fmt: skip
        return records
    crash_points.reached("share.dead_letters")
    # 4: alone, committed now; else the acknowledgement of the others carries it.
    commit_s = None if others else COMMIT_TIMEOUT_S
    if not others:
        entry.exposed(time.monotonic())  # its commit may acquire records for its buffer
    refused = acknowledge(entry.consumer, _coordinates(landed), "ACCEPT", None)
    refused |= acknowledge(entry.consumer, _coordinates(dead), "REJECT", commit_s)
    log.warning(
        "share group %s: %d record(s) on their last delivery (share.delivery.count.limit %d):"
        " %d went to the dead-letter table %s and were REJECTed (%s), %d were in the sink's "
        "table already and were ACCEPTed%s",
        group, len(last), task.delivery_limit, len(dead), task.dead_letter_table,
        dead_letters.describe(dead), len(landed),
        f"; the broker refused it in {refused} (their lock ran out: they are archived)"
        if refused else "",
    )  # fmt: skip
    return others


def _decoded(
    task: ShareTask, entry: consumers.PooledShareConsumer, batch: pa.RecordBatch, records: list[Any]
) -> tuple[pa.RecordBatch, list[Any]]:
    """``batch`` decoded, and the ``records`` left in it. Records that cannot be decoded fail
    the task (``RecordDecodeError``: closing the consumer releases them) without a dead-letter
    table; with one, they are written there, then REJECTed (archived), never read."""
    assert task.decode is not None
    decoding = task.decode.decoding()
    out = decoding.decode(batch)
    bad = decoding.dead_letters
    if not bad:
        return out, records
    assert task.dead_letter_table is not None  # decode() raised without one
    bad_records.write(task.dead_letter_table, bad, task.storage_options, dead_letters.SCHEMA)
    coordinates = {(r["topic"], r["partition"], r["offset"]) for r in bad}
    rejected = [m for m in records if (m.topic(), m.partition(), m.offset()) in coordinates]
    kept = [m for m in records if (m.topic(), m.partition(), m.offset()) not in coordinates]
    # alone, committed now; else the acknowledgement of the others carries it
    if not kept:
        entry.exposed(time.monotonic())  # its commit may acquire records for its buffer
    refused = acknowledge(
        entry.consumer, _coordinates(rejected), "REJECT", None if kept else COMMIT_TIMEOUT_S
    )
    log.warning(
        "share group %s: %d record(s) could not be decoded: they went to the dead-letter table "
        "%s and were REJECTed (%s), e.g. %s%s",
        task.config.get("group.id"), len(bad), task.dead_letter_table,
        dead_letters.describe(rejected), bad[0]["dead_letter_error"][:300],
        f"; the broker refused it in {refused} (their lock ran out: they are archived)"
        if refused else "",
    )  # fmt: skip
    return out, kept


def _coordinates(records: list[Any]) -> list[tuple[str, int, int]]:
    return [(m.topic(), m.partition(), m.offset()) for m in records]


def _batch(records: list[Any], include_headers: bool) -> pa.RecordBatch:
    rows = []
    for m in records:
        kind, ms = m.timestamp()
        row = {
            "key": m.key(),
            "value": m.value(),
            "topic": m.topic(),
            "partition": m.partition(),
            "offset": m.offset(),
            "timestamp": datetime.fromtimestamp(ms / 1000, UTC) if kind > 0 else None,
            "timestampType": kind - 1,  # librdkafka's types are Kafka's ids + 1
            DELIVERY_COUNT: m.delivery_count(),
        }
        if include_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in (m.headers() or [])]
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows, schema=share_arrow_schema(include_headers))
