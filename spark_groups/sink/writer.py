"""Executor side of the Delta sink: write a task's rows as Parquet files, one per Kafka partition.

A Spark task of a ``delta-group`` query hands its rows (Arrow record batches) to
:class:`TaskFileWriter`, which writes **one Parquet file per Kafka topic-partition** (and per
value of the table's partition columns) directly below the table's directory, and returns a
:class:`DataFile` for each: its path, size, row count, the partition's min/max offset, its
partition values and Delta statistics. Nothing is committed here: the driver decides per
Kafka partition whether a file is kept or dropped (``spark_groups.sink``), which is why the
files are split by Kafka partition.

Layout follows Delta's (and Hive's) convention: ``col=value/`` directories for partition
columns (values escaped like Spark does, ``__HIVE_DEFAULT_PARTITION__`` for null), the
partition columns themselves not stored in the files. An empty string in a partition column
is stored as null, as Spark and Delta do.

If writing fails, the task deletes the files it wrote before re-raising. Files of a task that
was killed outright stay behind unreferenced; Delta's ``VACUUM`` removes such files.
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
class DataFile:
    """One Parquet file written by a task: the rows of one Kafka partition (and one value of
    the partition columns).

    ``path`` is relative to the table's root, ``/``-separated and not URI-encoded (delta-rs
    encodes it in the log). Offsets are of the rows in the file: ``min_offset`` and
    ``max_offset`` are inclusive.
    """

    path: str
    size: int
    rows: int
    topic: str
    partition: int
    min_offset: int
    max_offset: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    stats: str = "{}"
    modification_time: int = 0

    @property
    def topic_partition(self) -> TopicPartition:
        """The Kafka partition whose rows the file holds."""
        return TopicPartition(self.topic, self.partition)


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
        tp: TopicPartition,
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
        self.tp = tp
        self.values = values
        self.rows = 0
        self.min_offset: int | None = None
        self.max_offset: int | None = None
        self.stats = {f.name: _Stats(f.type) for f in schema if _stats_type_ok(f.type)}

    def add(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)
        self.rows += batch.num_rows
        bounds = pc.min_max(batch.column("offset"))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        self.min_offset = low if self.min_offset is None else min(self.min_offset, low)
        self.max_offset = high if self.max_offset is None else max(self.max_offset, high)
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
        assert self.min_offset is not None and self.max_offset is not None
        return DataFile(
            path=self.relative,
            size=int(info.size),
            rows=self.rows,
            topic=self.tp.topic,
            partition=self.tp.partition,
            min_offset=self.min_offset,
            max_offset=self.max_offset,
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
        self._keys = ["topic", "partition", *self.partition_by]
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
            handle.add(part.drop_columns(list(self.partition_by)) if self.partition_by else part)

    def _split(self, batch: pa.RecordBatch) -> Iterable[tuple[tuple[Any, ...], pa.RecordBatch]]:
        """The rows of ``batch`` grouped by Kafka partition and partition values."""
        table = pa.Table.from_batches([batch])
        groups = table.group_by(self._keys, use_threads=False).aggregate([]).to_pylist()
        if len(groups) == 1:
            yield tuple(groups[0][k] for k in self._keys), batch
            return
        for group in groups:
            mask = None
            for name in self._keys:
                value = group[name]
                column = batch.column(name)
                term = pc.is_null(column) if value is None else pc.equal(column, value)
                mask = term if mask is None else pc.and_(mask, term)
            yield tuple(group[k] for k in self._keys), batch.filter(mask)

    def _new_file(self, key: tuple[Any, ...]) -> _OpenFile:
        topic, partition = str(key[0]), int(key[1])
        values = {
            name: partition_value(value)
            for name, value in zip(self.partition_by, key[2:], strict=True)
        }
        directory = partition_dir(self.partition_by, values)
        codec = "" if self.compression == "none" else f".{self.compression}"
        name = f"part-{self.prefix}{uuid.uuid4().hex}-{topic}-{partition}{codec}.parquet"
        relative = f"{directory}/{name}" if directory else name
        return _OpenFile(
            self._location(),
            relative,
            self.file_schema,
            self.compression,
            TopicPartition(topic, partition),
            values,
        )


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


def rewrite_from(
    table_path: str,
    data_file: DataFile,
    from_offset: int,
    compression: str = "snappy",
    storage_options: Mapping[str, str] | None = None,
) -> DataFile | None:
    """A new file with the rows of ``data_file`` at offsets ``>= from_offset`` (None when
    there are none), next to it. The original is left in place (the caller deletes it).

    The driver does this only for a file that straddles the offset a partition's table
    version has reached (two members planned different ranges of the partition).
    """
    where = location(table_path, storage_options)
    table = pq.read_table(where.child(data_file.path), filesystem=where.fs)
    kept = table.filter(pc.greater_equal(table.column("offset"), from_offset))
    if kept.num_rows == 0:
        return None
    directory, _, name = data_file.path.rpartition("/")
    stem = name.split(".", 1)[0]
    codec = "" if compression == "none" else f".{compression}"
    new_name = f"{stem}-from{from_offset}-{uuid.uuid4().hex[:8]}{codec}.parquet"
    relative = f"{directory}/{new_name}" if directory else new_name
    handle = _OpenFile(
        where,
        relative,
        table.schema,
        compression,
        data_file.topic_partition,
        dict(data_file.partition_values),
    )
    try:
        for batch in kept.to_batches():
            handle.add(batch)
        return handle.close()
    except BaseException:
        with contextlib.suppress(Exception):
            handle.writer.close()
        remove_files(table_path, [relative], storage_options)
        raise
