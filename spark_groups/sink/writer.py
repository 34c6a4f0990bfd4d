"""Executor side of the Delta sink: write a task's rows as Parquet files.

:class:`TaskFileWriter` writes one Parquet file per value of the table's partition columns
(one for an unpartitioned table) directly below the table, holding the rows of every Kafka
partition the task read, and returns a :class:`DataFile` for each (path, size, rows, per
Kafka partition its rows and offsets, partition values, Delta statistics). Nothing is
committed here; a file holding rows the driver leaves out is rewritten without them
(:func:`rewrite_keeping`, :func:`rewrite_without`). The layout is Delta's and Spark's
(``col=value/``, escaped like Spark, ``__HIVE_DEFAULT_PARTITION__`` for null and an empty
string). A task that fails deletes the files it wrote before re-raising.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_groups.errors import SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.storage.files import Location, location

log = logging.getLogger(__name__)

#: The columns of the source that must reach the sink, with their Arrow types.
KAFKA_COLUMNS = {"topic": pa.string(), "partition": pa.int32(), "offset": pa.int64()}

#: Partition value of null in directory names (Hive's and Spark's convention).
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"

#: String statistics longer than this are not recorded as a maximum (a truncated maximum
#: would be wrong) and are truncated as a minimum (a prefix is a valid lower bound).
STRING_STATS_PREFIX = 32

# Characters Spark escapes in partition directory names (ExternalCatalogUtils).
_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^")


@dataclass(frozen=True)
class KafkaRows:
    """The rows of one Kafka partition in one data file: how many, and the offsets of the
    first and the last (``min_offset`` and ``max_offset``, inclusive)."""

    topic: str
    partition: int
    rows: int
    min_offset: int
    max_offset: int

    @cached_property
    def topic_partition(self) -> TopicPartition:
        """The Kafka partition of these rows (made once: a sink decision asks for it many
        times)."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class DataFile:
    """One Parquet file written by a task: rows of one or more Kafka partitions (``kafka``,
    one :class:`KafkaRows` each, sorted) and of one value of the partition columns.

    ``path`` is relative to the table's root, ``/``-separated and not URI-encoded (delta-rs
    encodes it in the log).
    """

    path: str
    size: int
    rows: int
    kafka: tuple[KafkaRows, ...]
    partition_values: dict[str, str | None] = field(default_factory=dict)
    stats: str = "{}"
    modification_time: int = 0

    @property
    def topic_partitions(self) -> list[TopicPartition]:
        """The Kafka partitions whose rows the file holds."""
        return [k.topic_partition for k in self.kafka]


def check_schema(schema: pa.Schema, partition_by: Sequence[str]) -> None:
    """Refuse a schema without the source's Kafka columns, or with unusable partition columns.

    The rule (docs/sink.md): every row must carry the ``topic``, ``partition`` and ``offset``
    of the Kafka record it came from, unchanged, so the driver can keep or drop it.
    """
    missing = [name for name in KAFKA_COLUMNS if name not in schema.names]
    if missing:
        raise SinkError(
            f"the delta-group sink needs the kafka-group source's topic, partition and offset "
            f"columns in every row, unchanged; missing: {', '.join(missing)} (columns: "
            f"{', '.join(schema.names)}). Keep them through select/withColumn: they decide "
            "which rows a replayed batch has already written"
        )
    for name, expected in KAFKA_COLUMNS.items():
        actual = schema.field(name).type
        if not _same_kind(actual, expected):
            raise SinkError(
                f"the delta-group sink needs column {name!r} as the source gives it "
                f"({expected}), found {actual}"
            )
    if len(set(schema.names)) != len(schema.names):
        raise SinkError(f"duplicate column names: {', '.join(schema.names)}")
    for name in partition_by:
        if name not in schema.names:
            raise SinkError(
                f"partition column {name!r} is not a column of the query "
                f"({', '.join(schema.names)})"
            )
        kind = schema.field(name).type
        if not _partition_type_ok(kind):
            raise SinkError(
                f"partition column {name!r} has type {kind}; the delta-group sink partitions "
                "by string, integer, boolean or date columns only"
            )
    if len(partition_by) == len(schema.names):
        raise SinkError("every column is a partition column; the data files would be empty")


def _same_kind(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    return actual == expected


def _partition_type_ok(kind: pa.DataType) -> bool:
    return (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_date32(kind)
    )


def partition_value(value: Any) -> str | None:
    """A partition value as Delta stores it in ``partitionValues`` (None for null/empty)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def escape_path_name(value: str) -> str:
    """Escape a partition value for a directory name, as Spark does."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED or ord(c) < 0x20 else c for c in value)


def partition_dir(partition_by: Sequence[str], values: dict[str, str | None]) -> str:
    """The ``col=value/...`` directory of one set of partition values ("" when unpartitioned)."""
    parts = []
    for name in partition_by:
        value = values[name]
        shown = NULL_PARTITION if value is None else escape_path_name(value)
        parts.append(f"{escape_path_name(name)}={shown}")
    return "/".join(parts)


class _Stats:
    """Delta statistics of one column of one file, merged over record batches."""

    def __init__(self, kind: pa.DataType) -> None:
        self.kind = kind
        self.min: Any = None
        self.max: Any = None
        self.nulls = 0

    def add(self, column: pa.Array) -> None:
        self.nulls += column.null_count
        if column.null_count == len(column):
            return
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        self.min = low if self.min is None else min(self.min, low)
        self.max = high if self.max is None else max(self.max, high)

    def json_values(self) -> tuple[Any, Any]:
        """The (min, max) as Delta stats JSON values; None where not recorded."""
        low, high = self.min, self.max
        if pa.types.is_date32(self.kind):
            return (
                None if low is None else low.isoformat(),
                None if high is None else high.isoformat(),
            )
        if isinstance(low, str):
            low = low[:STRING_STATS_PREFIX]
        if isinstance(high, str) and len(high) > STRING_STATS_PREFIX:
            high = None
        return low, high


def _kafka_rows(kafka: pa.RecordBatch) -> list[tuple[str, int, int, int, int]]:
    """Per Kafka partition of ``kafka`` (topic, partition, offset): rows, min and max offset."""
    grouped = (
        pa.Table.from_batches([kafka])
        .group_by(["topic", "partition"], use_threads=False)
        .aggregate([("offset", "count"), ("offset", "min"), ("offset", "max")])
    )
    return list(
        zip(
            grouped.column("topic").to_pylist(),
            grouped.column("partition").to_pylist(),
            grouped.column("offset_count").to_pylist(),
            grouped.column("offset_min").to_pylist(),
            grouped.column("offset_max").to_pylist(),
            strict=True,
        )
    )


def _stats_type_ok(kind: pa.DataType) -> bool:
    return (
        pa.types.is_integer(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
    )


class _OpenFile:
    """One Parquet file being written (one Kafka partition, one set of partition values)."""

    def __init__(
        self,
        where: Location,
        relative: str,
        schema: pa.Schema,
        compression: str,
        values: dict[str, str | None],
    ) -> None:
        self.where = where
        self.relative = relative
        self.full = where.child(relative)
        parent = self.full.rsplit("/", 1)[0]
        where.fs.create_dir(parent, recursive=True)
        self.writer = pq.ParquetWriter(
            self.full,
            schema,
            filesystem=where.fs,
            compression=None if compression == "none" else compression,
        )
        self.values = values
        self.rows = 0
        #: Per Kafka partition: [rows, min offset, max offset].
        self.kafka: dict[tuple[str, int], list[int]] = {}
        self.stats = {f.name: _Stats(f.type) for f in schema if _stats_type_ok(f.type)}

    def add(self, batch: pa.RecordBatch, kafka: pa.RecordBatch) -> None:
        """Write ``batch`` (the file's columns); ``kafka`` is its rows' topic, partition and
        offset (columns the file may not store: the table may be partitioned by them)."""
        self.writer.write_batch(batch)
        self.rows += batch.num_rows
        for topic, partition, rows, low, high in _kafka_rows(kafka):
            seen = self.kafka.get((topic, partition))
            if seen is None:
                self.kafka[(topic, partition)] = [rows, low, high]
            else:
                seen[0] += rows
                seen[1], seen[2] = min(seen[1], low), max(seen[2], high)
        for name, stats in self.stats.items():
            stats.add(batch.column(name))

    def close(self) -> DataFile:
        self.writer.close()
        info = self.where.fs.get_file_info(self.full)
        mtime = info.mtime
        modified = int(mtime.timestamp() * 1000) if mtime is not None else int(time.time() * 1000)
        mins, maxs = {}, {}
        for name, stats in self.stats.items():
            low, high = stats.json_values()
            if low is not None:
                mins[name] = low
            if high is not None:
                maxs[name] = high
        stats_json = json.dumps(
            {
                "numRecords": self.rows,
                "minValues": mins,
                "maxValues": maxs,
                "nullCount": {name: s.nulls for name, s in self.stats.items()},
            },
            separators=(",", ":"),
        )
        return DataFile(
            path=self.relative,
            size=int(info.size),
            rows=self.rows,
            kafka=tuple(
                KafkaRows(topic, partition, rows, low, high)
                for (topic, partition), (rows, low, high) in sorted(self.kafka.items())
            ),
            partition_values=dict(self.values),
            stats=stats_json,
            modification_time=modified,
        )


class TaskFileWriter:
    """Writes the rows of one Spark task into Parquet files below ``table_path``.

    ``schema`` is the query's Arrow schema (rows are cast to it); ``partition_by`` the
    table's partition columns; ``prefix`` goes into every file name (the batch id).
    """

    def __init__(
        self,
        table_path: str,
        schema: pa.Schema,
        partition_by: Sequence[str] = (),
        compression: str = "snappy",
        prefix: str = "",
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        check_schema(schema, partition_by)
        self.table_path = table_path
        self.storage_options = dict(storage_options) if storage_options else None
        self.schema = schema
        self.partition_by = tuple(partition_by)
        self.file_schema = pa.schema([f for f in schema if f.name not in self.partition_by])
        self.compression = compression
        self.prefix = prefix
        self._open: dict[tuple[Any, ...], _OpenFile] = {}
        self._done: list[DataFile] = []
        self._where: Location | None = None

    def write(self, batches: Iterable[pa.RecordBatch]) -> list[DataFile]:
        """Write every batch; return the files written. On error, delete them and re-raise."""
        try:
            for batch in batches:
                if batch.num_rows:
                    self._write_batch(self._conform(batch))
            for key in list(self._open):
                self._done.append(self._open.pop(key).close())
        except BaseException:
            self.discard()
            raise
        log.debug("wrote %d file(s) below %s", len(self._done), self.table_path)
        return list(self._done)

    def discard(self) -> None:
        """Delete every file this writer wrote or started (best effort)."""
        paths = [f.path for f in self._done]
        for handle in self._open.values():
            with contextlib.suppress(Exception):  # the file is deleted next anyway
                handle.writer.close()
            paths.append(handle.relative)
        self._open.clear()
        self._done.clear()
        if paths:
            remove_files(self.table_path, paths, self.storage_options)

    def _location(self) -> Location:
        if self._where is None:
            self._where = location(self.table_path, self.storage_options)
        return self._where

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the query's columns, in order and types (Spark's Arrow types vary
        with settings: time zones, large strings)."""
        if batch.schema.names != self.schema.names:
            raise SinkError(
                f"a task produced columns {batch.schema.names}, expected {self.schema.names}"
            )
        if not batch.schema.equals(self.schema):
            batch = batch.cast(self.schema)
        for name in self.partition_by:
            column = batch.column(name)
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                empty = pc.fill_null(pc.equal(column, ""), False)
                if pc.any(empty).as_py():  # Delta stores "" as null in partition values
                    nulls = pa.nulls(len(column), column.type)
                    index = batch.schema.get_field_index(name)
                    batch = batch.set_column(
                        index, batch.schema.field(name), pc.if_else(empty, nulls, column)
                    )
        for name in KAFKA_COLUMNS:
            if batch.column(name).null_count:
                raise SinkError(
                    f"a row has a null {name!r}: every row written to the delta-group sink must "
                    "come from a kafka-group record (no outer joins or unions with other sources)"
                )
        return batch

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        for key, part in self._split(batch):
            handle = self._open.get(key)
            if handle is None:
                handle = self._new_file(key)
                self._open[key] = handle
            stored = part.drop_columns(list(self.partition_by)) if self.partition_by else part
            handle.add(stored, part.select(list(KAFKA_COLUMNS)))

    def _split(self, batch: pa.RecordBatch) -> Iterable[tuple[tuple[Any, ...], pa.RecordBatch]]:
        """The rows of ``batch`` grouped by the values of the partition columns."""
        if not self.partition_by:
            yield (), batch
            return
        keys = list(self.partition_by)
        table = pa.Table.from_batches([batch])
        groups = table.group_by(keys, use_threads=False).aggregate([]).to_pylist()
        if len(groups) == 1:
            yield tuple(groups[0][k] for k in keys), batch
            return
        for group in groups:
            mask = None
            for name in keys:
                value = group[name]
                column = batch.column(name)
                term = pc.is_null(column) if value is None else pc.equal(column, value)
                mask = term if mask is None else pc.and_(mask, term)
            yield tuple(group[k] for k in keys), batch.filter(mask)

    def _new_file(self, key: tuple[Any, ...]) -> _OpenFile:
        values = {
            name: partition_value(value) for name, value in zip(self.partition_by, key, strict=True)
        }
        directory = partition_dir(self.partition_by, values)
        codec = "" if self.compression == "none" else f".{self.compression}"
        name = f"part-{self.prefix}{uuid.uuid4().hex}{codec}.parquet"
        relative = f"{directory}/{name}" if directory else name
        return _OpenFile(self._location(), relative, self.file_schema, self.compression, values)


def remove_files(
    table_path: str, paths: Iterable[str], storage_options: Mapping[str, str] | None = None
) -> int:
    """Delete data files (relative to ``table_path``) that no commit references; return how
    many were deleted. Missing files are ignored; other failures are logged, never raised
    (an orphan file is harmless and Delta's VACUUM removes it)."""
    where = location(table_path, storage_options)
    deleted = 0
    for relative in paths:
        full = where.child(relative)
        try:
            where.fs.delete_file(full)
            deleted += 1
        except FileNotFoundError:
            continue
        except Exception as exc:
            log.warning(
                "could not delete uncommitted file %s: %s: %s", full, type(exc).__name__, exc
            )
    return deleted


def rewrite_keeping(
    table_path: str,
    data_file: DataFile,
    starts: Mapping[TopicPartition, int],
    compression: str = "snappy",
    storage_options: Mapping[str, str] | None = None,
) -> DataFile | None:
    """A new file with the rows of ``data_file`` that are kept: of each Kafka partition in
    ``starts``, the rows at offsets ``>= starts[tp]``; of partitions not in it, none. None when
    nothing is kept. Written next to the original, which is left in place (the caller
    deletes it).

    The driver does this only for a file holding rows the table has already (a replay, or two
    members that planned different ranges of a partition) or rows of a partition left out of
    the commit (fenced).
    """
    where = location(table_path, storage_options)
    table = pq.read_table(where.child(data_file.path), filesystem=where.fs)
    kafka = _kafka_columns(table, data_file)
    wanted = pa.table(
        {
            "topic": pa.array([tp.topic for tp in starts], pa.string()),
            "partition": pa.array([tp.partition for tp in starts], pa.int32()),
            "__start": pa.array(list(starts.values()), pa.int64()),
        }
    )
    numbered = kafka.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    joined = numbered.join(wanted, keys=["topic", "partition"], join_type="inner")
    chosen = joined.filter(pc.greater_equal(joined["offset"], joined["__start"]))["__row"]
    return _rewrite(table_path, data_file, table, kafka, chosen, compression, storage_options)


def rewrite_without(
    table_path: str,
    data_file: DataFile,
    dropped: Mapping[TopicPartition, Iterable[int]],
    compression: str = "snappy",
    storage_options: Mapping[str, str] | None = None,
) -> DataFile | None:
    """A new file with the rows of ``data_file`` except those at the offsets ``dropped``
    names per Kafka partition (a share batch's records the table holds already); None when
    nothing is kept. Written next to the original, which is left in place."""
    where = location(table_path, storage_options)
    table = pq.read_table(where.child(data_file.path), filesystem=where.fs)
    kafka = _kafka_columns(table, data_file)
    drop = pa.array([False] * table.num_rows, pa.bool_())
    for tp, offsets in dropped.items():
        here = pc.and_(
            pc.equal(kafka["topic"], tp.topic), pc.equal(kafka["partition"], tp.partition)
        )
        gone = pc.is_in(kafka["offset"], value_set=pa.array(list(offsets), pa.int64()))
        drop = pc.or_(drop, pc.and_(here, gone))
    chosen = pc.indices_nonzero(pc.invert(drop))
    return _rewrite(table_path, data_file, table, kafka, chosen, compression, storage_options)


def _rewrite(
    table_path: str,
    data_file: DataFile,
    table: pa.Table,
    kafka: pa.Table,
    chosen: Any,
    compression: str,
    storage_options: Mapping[str, str] | None,
) -> DataFile | None:
    """The rows ``chosen`` (indices) of ``table``, the contents of ``data_file``, as a new
    file next to it; None when none are chosen."""
    if len(chosen) == 0:
        return None
    where = location(table_path, storage_options)
    in_order = pc.take(chosen, pc.sort_indices(chosen))
    kept = table.take(in_order).combine_chunks().to_batches()[0]
    marks = kafka.take(in_order).combine_chunks().to_batches()[0]
    directory, _, name = data_file.path.rpartition("/")
    stem = name.split(".", 1)[0]
    codec = "" if compression == "none" else f".{compression}"
    new_name = f"{stem}-kept-{uuid.uuid4().hex[:8]}{codec}.parquet"
    relative = f"{directory}/{new_name}" if directory else new_name
    handle = _OpenFile(where, relative, table.schema, compression, dict(data_file.partition_values))
    try:
        handle.add(kept, marks)
        return handle.close()
    except BaseException:
        with contextlib.suppress(Exception):
            handle.writer.close()
        remove_files(table_path, [relative], storage_options)
        raise


def _kafka_columns(table: pa.Table, data_file: DataFile) -> pa.Table:
    """The topic, partition and offset of every row of ``table`` (a data file's contents),
    taken from the partition values where the table is partitioned by them."""
    columns = {}
    for name, kind in KAFKA_COLUMNS.items():
        if name in table.column_names:
            columns[name] = table.column(name).cast(kind)
        else:
            value = data_file.partition_values.get(name)
            constant = None if value is None else (int(value) if name != "topic" else value)
            columns[name] = pa.array([constant] * table.num_rows, kind)
    return pa.table(columns)
