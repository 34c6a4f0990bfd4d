"""The Spark-facing exactly-once Delta sink ``delta-group``, and reading Delta tables back.

``DeltaGroupDataSource.streamWriter()`` runs in a Python worker on the driver for every
batch (and again in the one that commits it): it takes the table and the group from the
batch's source (``spark_groups.sink.pipeline``), checks the options, the query's columns and
that the checkpoint can be read, and chooses the commit strategy
(``spark_groups.sink.strategy``), so a bad pipeline fails before any task writes.
``write()`` runs on executors, one call per task (``spark_groups.sink.placement``, then
``spark_groups.sink.writer``), and sends a :class:`SinkTaskMessage` to the driver;
``commit()`` / ``abort()`` run on the driver once every task finished or one failed.
:func:`read_delta` reads one pinned version's files in Spark without Delta's jars.
docs/sink.md, "Where things run".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

from spark_groups.errors import SinkError, SparkGroupsError
from spark_groups.options.sink import SinkOptions, parse_sink_options
from spark_groups.sink.group_commit import DeltaSink
from spark_groups.sink.pipeline import SinkTarget, check_target, target_for_next_batch, target_of
from spark_groups.sink.placement import check_table_reachable
from spark_groups.sink.plan import read_batch_plan
from spark_groups.sink.strategy import CommitStrategy, strategy_for
from spark_groups.sink.upkeep import upkeep_for
from spark_groups.sink.writer import (
    NULL_PARTITION,
    DataFile,
    TaskFileWriter,
    check_schema,
    partition_value,
)
from spark_groups.spark import SINK_FORMAT, planner_accumulators
from spark_groups.spark.compat import ARROW_STREAM_WRITER, arrow_schema
from spark_groups.spark.task_context import BATCH_ID_PROPERTY
from spark_groups.spark.worker_logging import log_to_stderr
from spark_groups.storage.checkpoint import check_readable
from spark_groups.storage.delta import bound_allocator
from spark_groups.storage.files import table_uri

log = logging.getLogger(__name__)

#: The local property that carries the session's Spark master to every task of a SQL
#: execution (``SQLExecution.withSQLConfPropagated``; see ``spark_groups.sink.placement``).
MASTER_PROPERTY = "spark.master"


class SinkTaskMessage(WriterCommitMessage):
    """What one task wrote: its data files (picklable, sent to the driver) and what the
    batch's commit strategy adds to them (``note``; None: nothing)."""

    def __init__(self, files: Sequence[DataFile], task: int | None = None, note: Any = None):
        self.files = list(files)
        self.task = task
        self.note = note

    def __repr__(self) -> str:
        return f"SinkTaskMessage(task={self.task}, files={len(self.files)})"


def arrow_schema_of(schema: Any) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType`` as the sink writes it (timestamps in UTC)."""
    return arrow_schema(schema)


if ARROW_STREAM_WRITER:  # pyspark 4.1+: the tasks get Arrow batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _WriterBase
else:  # pyspark 4.0: the tasks get rows (rows_as_batches)
    _WriterBase = DataSourceStreamWriter  # type: ignore[assignment,misc]

#: Rows per Arrow batch when a task gets rows (pyspark 4.0).
ROWS_PER_BATCH = 10_000


def rows_as_batches(rows: Iterator[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Spark rows (pyspark 4.0's stream writers get no Arrow) as Arrow batches of ``schema``.
    Spark gives timestamps as naive datetimes in the worker's local time: they are made
    aware first, so the UTC column holds the same instant."""
    zoned = [f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.tz is not None]
    chunk: list[dict[str, Any]] = []
    for row in rows:
        record = row.asDict(recursive=True)
        for name in zoned:
            value = record.get(name)
            if value is not None and value.tzinfo is None:
                record[name] = value.astimezone()
        chunk.append(record)
        if len(chunk) >= ROWS_PER_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


class DeltaGroupStreamWriter(_WriterBase):
    """Writes a batch's rows on executors; commits or aborts the batch on the driver."""

    def __init__(
        self,
        options: SinkOptions,
        target: SinkTarget,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        strategy: CommitStrategy,
    ) -> None:
        self.options = options
        self.target = target
        self.schema = schema
        self.partition_by = partition_by
        self.strategy = strategy

    def _sink(self) -> DeltaSink:
        o = self.options
        return DeltaSink(
            self.target.path,
            self.target.group_id,
            storage_options=o.storage_options,
            partition_by=self.partition_by,
            merge_schema=o.merge_schema,
            fail_on_gap=o.fail_on_gap,
            member=o.member,
            compression=o.compression,
        )

    def write(self, iterator: Iterator[Any]) -> SinkTaskMessage:
        """Executor side: write the task's rows, one Parquet file per value of the partition
        columns."""
        from pyspark import TaskContext

        if not ARROW_STREAM_WRITER:
            iterator = rows_as_batches(iterator, self.schema)

        context = TaskContext.get()
        if context is not None:  # before any file: a local table on a cluster is refused
            check_table_reachable(
                self.target.path,
                context.getLocalProperty(MASTER_PROPERTY),
                self.options.shared_mount,
            )
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        prefix = f"{int(batch):05d}-" if batch is not None and batch.isdigit() else ""
        writer = TaskFileWriter(
            table_uri(self.target.path),
            self.schema,
            self.partition_by,
            compression=self.options.compression,
            prefix=prefix,
            storage_options=self.options.storage_options,
        )
        files, note = self.strategy.write_task(writer, iterator)
        return SinkTaskMessage(files, context.partitionId() if context is not None else None, note)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: one Delta commit for the batch (see ``spark_groups.sink``)."""
        log_to_stderr()
        bound_allocator()  # the sink's commit process: delta-rs loads here
        files = _files_of(messages)
        log.debug("sink %s: committing batch %d: %d file(s)", self.target.path, batchId, len(files))
        sink = self._sink()
        try:
            options = self.options
            plan = read_batch_plan(
                options.checkpoint, batchId, options.storage_options, self.target.group_id
            )
            check_target(self.target, target_of(options, plan.pipeline, batchId), batchId)
            planned = strategy_for(plan.offsets)
            if planned.source != self.strategy.source:
                raise SinkError(
                    f"sink {self.target.path}: batch {batchId} was planned by a "
                    f"{planned.source} source but its tasks wrote as for a "
                    f"{self.strategy.source} source; nothing was committed"
                )
        except SparkGroupsError:
            sink.abort(files)
            raise
        notes = [m.note for m in messages if isinstance(m, SinkTaskMessage)]
        version = self.strategy.commit(sink, plan, files, notes, self.schema)
        upkeep_for(
            self.target.path, options.storage_options, options.member, options.compact_every
        ).after_commit(version)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: a task failed; delete the files the others wrote."""
        log_to_stderr()
        files = _files_of(messages)
        log.warning(
            "sink %s: batch %d aborted by Spark; deleting %d file(s)",
            self.target.path,
            batchId,
            len(files),
        )
        self._sink().abort(files)


def _files_of(messages: list[WriterCommitMessage | None]) -> list[DataFile]:
    return [f for m in messages if isinstance(m, SinkTaskMessage) for f in m.files]


class DeltaGroupDataSource(DataSource):
    """``df.writeStream.format("delta-group")``: exactly-once into a Delta table."""

    def __init__(self, options: dict[str, str]) -> None:
        planner_accumulators.quiet()  # Spark 4.2+ planner workers (the module's doc)
        super().__init__(options)
        self.parsed = parse_sink_options(options)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled in a planner worker: :func:`planner_accumulators.quiet` first."""
        planner_accumulators.quiet()
        self.__dict__.update(state)

    @classmethod
    def name(cls) -> str:
        """The short format name."""
        return SINK_FORMAT

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        """The writer of one micro-batch; checks the query's columns first."""
        if overwrite:
            raise SinkError(
                "the delta-group sink supports outputMode('append') only (complete mode would "
                "replace the table every batch, which no per-partition offset can fence)"
            )
        arrow = arrow_schema_of(schema)
        o = self.parsed
        # The commit reads the batch's plan there: fail now, before any task writes, if this
        # Python cannot (on S3: no storage.* options that reach it).
        check_readable(o.checkpoint, o.storage_options)
        # The table, the group and the commit strategy, from the batch's source offsets.
        target, offsets = target_for_next_batch(o)
        partition_by = o.partition_by
        if partition_by is None:
            existing = DeltaSink(
                target.path, target.group_id, storage_options=o.storage_options
            ).table_partition_columns()
            partition_by = existing or ()
        check_schema(arrow, partition_by)
        return DeltaGroupStreamWriter(o, target, arrow, tuple(partition_by), strategy_for(offsets))


# ---------------------------------------------------------------------- reading back


def has_delta(spark: Any) -> bool:
    """Whether ``spark`` was started with delta-spark (its SQL extension is configured)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return "DeltaSparkSessionExtension" in extensions


def read_table(spark: Any, path: str, version: int | None = None) -> Any:
    """A DataFrame of the Delta table at ``path`` (as of ``version``): with
    ``spark.read.format("delta")`` where delta-spark is present, else :func:`read_delta`."""
    if has_delta(spark):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)
    return read_delta(spark, path, version)


def read_delta(
    spark: Any,
    path: str,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """A DataFrame of the Delta table at ``path`` as of ``version`` (default: the newest
    version now), read by Spark's Parquet reader without Delta's jars.

    The file list is that of the pinned version (from delta-rs); the bare folder is never
    read, so removed, rewritten and uncommitted files are not seen. Partition columns are
    taken from the ``col=value`` directories of the files, which is checked against the log
    (tables written by this sink, delta-rs or Spark's Delta have that layout). Delta features
    that change how files are read (deletion vectors, column mapping) are refused. The
    DataFrame reads the files when an action runs: a ``VACUUM`` in between can remove them.
    """
    from deltalake import DeltaTable
    from pyspark.sql.types import StructType

    uri = table_uri(path)
    try:
        table = DeltaTable(uri, version=version, storage_options=storage_options)
    except Exception as exc:
        raise SinkError(f"read_delta {path}: {type(exc).__name__}: {exc}") from exc
    protocol = table.protocol()
    features = set(protocol.reader_features or [])
    unsupported = features & {"deletionVectors", "columnMapping", "v2Checkpoint"}
    if unsupported or (protocol.min_reader_version == 2):
        raise SinkError(
            f"read_delta {path}: the table uses reader features {sorted(unsupported) or ['2']} "
            "that plain Parquet reading cannot honour; use Spark with Delta"
        )
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    partition_columns = list(table.metadata().partition_columns)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    root = uri.rstrip("/")
    uris = [_spark_path(f"{root}/{unquote(a['path'])}") for a in actions]
    if not uris:
        return spark.createDataFrame([], schema)
    if partition_columns:
        _check_hive_layout(path, actions, partition_columns)
        reader = spark.read.schema(schema).option("basePath", _spark_path(root))
    else:
        reader = spark.read.schema(schema)
    return reader.parquet(*uris).select(*schema.fieldNames())


def _spark_path(path: str) -> str:
    """A local absolute path as an explicit ``file:`` URI (a cluster's default file system
    may be HDFS); URIs unchanged."""
    return f"file://{path}" if path.startswith("/") else path


def _check_hive_layout(path: str, actions: list[dict[str, Any]], columns: list[str]) -> None:
    """Every file must sit in ``col=value/`` directories that match its partition values."""
    for action in actions:
        relative = unquote(action["path"])
        directories = relative.split("/")[:-1]
        found = {}
        for part in directories:
            name, sep, value = part.partition("=")
            if sep:
                found[unquote(name)] = None if value == NULL_PARTITION else unquote(value)
        for column in columns:
            expected = partition_value(action.get(f"partition.{column}"))
            if column not in found or found[column] != expected:
                raise SinkError(
                    f"read_delta {path}: file {relative} is not in a '{column}=...' directory "
                    f"matching its partition value {expected!r}; this table's layout cannot be "
                    "read without Delta"
                )
