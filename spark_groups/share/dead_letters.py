"""Records a share group gives out for the last time go to the dead-letter table.

After a record's last delivery (``share.delivery.count.limit``) a RELEASE or an expired lock
archives it, so with ``deadLetter.table`` a reading task does not read it into the batch once
more: 1. split the poll's records (:func:`last_deliveries`); 2. leave out those the sink's
table has already (:func:`landed`); 3. write the rest to the dead-letter table in one append
from the task (:func:`write`; the driver made the table, :func:`ensure_table`); 4. ACCEPT
those of 2 and REJECT those of 3 on the consumer that acquired them. When the write fails the
records are read into the batch instead: a table that cannot be written never costs a record.
docs/share-groups.md, "Poison records".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from spark_groups.deadletter import ERROR_COLUMN
from spark_groups.formats import bad_records
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.sink.share_info import RecentOffsets
from spark_groups.storage import delta

log = logging.getLogger(__name__)

#: The dead-letter table's columns (``formats.bad_records.SHARE_SCHEMA``): those of
#: ``spark_groups.deadletter``, then the delivery count, the share group and the schema id
#: (of a record that could not be decoded; null for one on its last delivery).
SCHEMA = bad_records.SHARE_SCHEMA


def last_deliveries(records: Sequence[Any], limit: int) -> tuple[list[Any], list[Any]]:
    """Step 1: ``records`` (confluent-kafka messages) split into (the others, those on their
    last delivery: ``delivery_count() >= limit``)."""
    others: list[Any] = []
    last: list[Any] = []
    for m in records:
        (last if (m.delivery_count() or 0) >= limit else others).append(m)
    return others, last


def landed(
    table: str, records: Sequence[Any], storage_options: Mapping[str, str] | None = None
) -> tuple[list[Any], list[Any]]:
    """Step 2: ``records`` split into (those a recent share commit of the sink's ``table``
    wrote, the others)."""
    snapshot = delta.open_table(table, storage_options)
    if snapshot is None:
        return [], list(records)
    recent = RecentOffsets()
    recent.refresh(snapshot)
    offsets = PartitionOffsets.of(
        (TopicPartition(m.topic(), m.partition()), m.offset()) for m in records
    )
    written = recent.already_written(offsets)
    found: list[Any] = []
    rest: list[Any] = []
    for m in records:
        held = written.get(TopicPartition(m.topic(), m.partition()))
        (found if held is not None and m.offset() in held else rest).append(m)
    return found, rest


def ensure_table(path: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Make the dead-letter table at ``path`` when there is none (driver side, once, so the
    tasks only append); an existing table must have the dead-letter columns."""
    bad_records.ensure_table(path, storage_options, SCHEMA, "kafka-share")


def write(
    path: str,
    records: Sequence[Any],
    group: str,
    limit: int,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Step 3: append ``records`` (on their last delivery in share group ``group``) to the
    dead-letter table at ``path``; returns once the commit is in the table."""
    why = (
        f"delivered {{count}} times, share group {group!r}'s share.delivery.count.limit is "
        f"{limit}: each batch it was read into before failed"
    )
    rows = []
    for m in records:
        kind, ms = m.timestamp()
        rows.append(
            {
                "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                "timestamp": datetime.fromtimestamp(ms / 1000, UTC) if kind > 0 else None,
                "key": m.key(), "value": m.value(),
                ERROR_COLUMN: why.format(count=m.delivery_count()),
                "deliveryCount": m.delivery_count(), "group": group,
            }
        )  # fmt: skip
    bad_records.write(path, rows, storage_options, SCHEMA)


def describe(records: Sequence[Any], limit: int = 20) -> str:
    """``topic-partition@offset`` of the first ``limit`` of ``records``, for a log line."""
    named = [f"{m.topic()}-{m.partition()}@{m.offset()}" for m in records[:limit]]
    return ", ".join(named) + (f" and {len(records) - limit} more" if len(records) > limit else "")
