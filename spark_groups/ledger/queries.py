"""Reading the ledger: the group's positions, its rows, its last batch.

A partition's position is the highest ``until_offset`` since its last reset marker
(:data:`~spark_groups.ledger.rows.RESET_BATCH`), the marker included. Reads refresh the table
and go through delta-rs' DataFusion (:func:`spark_groups.storage.delta.query`): only the
needed columns, the group predicate pushed down to the scan; their cost grows with the active
files, which compaction keeps few. Never ``DeltaTable.to_pyarrow_table()`` with its default
file system: docs/sink.md, "Reading it back".
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import pyarrow as pa

from spark_groups.ledger.rows import LEDGER_SCHEMA, OUTSIDE_BATCH, RESET_BATCH
from spark_groups.ledger.store import SQL_TABLE, LedgerStore
from spark_groups.offsets import TopicPartition

_HISTORY_ORDER = [
    ("committed_at", "ascending"),
    ("batch", "ascending"),
    ("topic", "ascending"),
    ("partition", "ascending"),
]


def latest_positions(
    store: LedgerStore, partitions: Iterable[TopicPartition] | None, own_only: bool
) -> dict[TopicPartition, int]:
    """The group's position per partition (of ``partitions`` only, when given), without rows
    of offsets committed outside spark_groups with ``own_only``; ``{}`` when the table does
    not exist (:meth:`OffsetLedger.latest_positions
    <spark_groups.ledger.offset_ledger.OffsetLedger.latest_positions>`)."""
    wanted = None if partitions is None else set(partitions)
    if wanted is not None and not wanted:
        return {}
    # Partitions are picked after the aggregation, not in the SQL: an OR of
    # topic/partition terms slows DataFusion down per file, and Parquet statistics cannot
    # skip anything here (every file holds every partition).
    where = store.where
    sql = (
        f'WITH r AS (SELECT "topic" AS r_topic, "partition" AS r_partition, '
        f'MAX("committed_at") AS r_at FROM {SQL_TABLE} '
        f'WHERE {where} AND "batch" = {RESET_BATCH} GROUP BY "topic", "partition") '
        f'SELECT "topic", "partition", MAX("until_offset") AS "until_offset" '
        f"FROM {SQL_TABLE} LEFT JOIN r "
        f'ON "topic" = r_topic AND "partition" = r_partition '
        f'WHERE {where} AND (r_at IS NULL OR "committed_at" > r_at '
        f'OR ("batch" = {RESET_BATCH} AND "committed_at" = r_at)) '
        + (f'AND "batch" <> {OUTSIDE_BATCH} ' if own_only else "")
        + 'GROUP BY "topic", "partition"'
    )
    table = store.query(sql)
    if table is None:
        return {}
    positions = {
        TopicPartition(str(topic), int(partition)): int(until)
        for topic, partition, until in zip(
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("until_offset").to_pylist(),
            strict=True,
        )
    }
    if wanted is None:
        return positions
    return {tp: until for tp, until in positions.items() if tp in wanted}


def history(
    store: LedgerStore,
    partitions: Iterable[TopicPartition] | None,
    since: datetime | None,
    until: datetime | None,
) -> pa.Table:
    """The group's rows, oldest first, of ``partitions`` and ``since <= committed_at < until``
    when given (:meth:`OffsetLedger.history
    <spark_groups.ledger.offset_ledger.OffsetLedger.history>`)."""
    # Imported here, not with the module: it would slow every reader process's start, and
    # the reader process reads history only when its maintenance expires old rows.
    import pyarrow.compute as pc

    for name, bound in (("since", since), ("until", until)):
        if bound is not None and bound.utcoffset() is None:
            raise store.error(
                f"{store.name}: history({name}=...) needs a timezone-aware datetime, got {bound!r}"
            )
    wanted = None if partitions is None else set(partitions)
    if wanted is not None and not wanted:
        return LEDGER_SCHEMA.empty_table()
    table = store.query(f"SELECT * FROM {SQL_TABLE} WHERE {store.where}")
    if table is None:
        return LEDGER_SCHEMA.empty_table()
    if "log_end" not in table.column_names:  # written before the column existed
        table = table.append_column("log_end", pa.nulls(table.num_rows, pa.int64()))
    table = table.select(LEDGER_SCHEMA.names).cast(LEDGER_SCHEMA)
    if wanted is not None:
        table = table.filter(_partition_mask(table, wanted))
    if since is not None:
        bound = pa.scalar(since, type=pa.timestamp("us", tz="UTC"))
        table = table.filter(pc.greater_equal(table.column("committed_at"), bound))
    if until is not None:
        bound = pa.scalar(until, type=pa.timestamp("us", tz="UTC"))
        table = table.filter(pc.less(table.column("committed_at"), bound))
    return table.sort_by(_HISTORY_ORDER)


def last_batch(store: LedgerStore) -> int | None:
    """The highest batch number the group recorded; ``None`` for an empty ledger."""
    table = store.query(f'SELECT MAX("batch") AS "batch" FROM {SQL_TABLE} WHERE {store.where}')
    if table is None or table.num_rows == 0:
        return None
    value = table.column("batch")[0].as_py()
    return None if value is None else int(value)


def newest_commit(store: LedgerStore) -> datetime | None:
    """The newest ``committed_at`` of the group's rows; ``None`` for an empty ledger."""
    newest = store.query(f'SELECT MAX("committed_at") AS "at" FROM {SQL_TABLE} WHERE {store.where}')
    if newest is not None and newest.num_rows:
        value: datetime | None = newest.column("at")[0].as_py()
        return value
    return None


def _partition_mask(table: pa.Table, partitions: set[TopicPartition]) -> pa.ChunkedArray:
    """A boolean mask of the rows of ``table`` that belong to ``partitions``."""
    import pyarrow.compute as pc

    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    mask = pc.equal(table.column("partition"), -1)  # all false
    for topic, parts in by_topic.items():
        in_topic = pc.equal(table.column("topic"), topic)
        in_parts = pc.is_in(table.column("partition"), value_set=pa.array(parts, pa.int32()))
        mask = pc.or_(mask, pc.and_(in_topic, in_parts))
    return mask
