"""The Spark-facing data source ``kafka-group``: a thin adapter over the other modules.

``KafkaGroupDataSource.__init__`` and ``schema()`` run in Python workers when the query is
defined, so bad options fail ``load()``. ``KafkaGroupStreamReader`` is built in a planning
worker, pickled to executors for ``read()``, and built once more in the long-lived reader
process on the driver, the only place that joins the group (``GroupStream``, lazily, on the
first offset call). On Spark 4.0 and 4.1 (no admission control) ``latestOffset()`` gets no
arguments: the reader knows where the query stands from what it returned last, or from the
offset log in a restarted process (hence ``checkpointLocation``), and applies
``maxOffsetsPerTrigger`` itself. docs/architecture.md, "Which process runs what";
docs/spark-versions.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from spark_groups.errors import OptionNeedsSparkError
from spark_groups.formats.decoder import DecodePlan, plan_decoding
from spark_groups.formats.spark_ddl import ddl
from spark_groups.offsets import BatchOffset, OffsetRange
from spark_groups.options import (
    SourceOptions,
    in_flow_checkpoint,
    parse_options,
    validate_client_config,
)
from spark_groups.read.schema import arrow_schema, spark_ddl
from spark_groups.read.tasks import plan_tasks
from spark_groups.spark import FORMAT, planner_accumulators
from spark_groups.spark.compat import (
    ADMISSION_CONTROL,
    SPARK_VERSION,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from spark_groups.storage import checkpoint

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.source")


class RangesPartition(InputPartition):
    """One Spark task: read ``ranges``, at most one range per Kafka partition
    (``spark_groups.read.tasks`` splits a batch's ranges and decides which share a task)."""

    def __init__(self, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(ranges)

    @property
    def ranges(self) -> tuple[OffsetRange, ...]:
        """The task's ranges."""
        return self.value


class KafkaGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader: tasks of split and packed ranges (``minPartitions``,
    ``maxRecordsPerPartition``, ``recordsPerTask``), offsets owned by the group."""

    def __init__(self, options: SourceOptions, decode: DecodePlan | None = None) -> None:
        self.options = options
        self.decode = decode
        self._stream: Any = None  # GroupStream, created lazily in the reader process only
        # Spark 4.0/4.1: the offsets returned last (Spark's start of the next batch).
        self._last_end: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_stream"] = None  # clients cannot be pickled, and executors never need them
        return state

    def _driver(self) -> Any:
        if self._stream is None:
            from spark_groups.group.stream import GroupStream  # driver-only dependencies
            from spark_groups.sink.delta_arbiter import for_source

            self._stream = GroupStream(self.options, for_source(self.options))
        return self._stream

    def initialOffset(self) -> dict[str, Any]:
        """Nothing planned yet; positions come from the group at the first batch."""
        self._driver().ensure_started()
        # Spark may log it as a batch's end (an AvailableNow run that found nothing): it names
        # the group and table too, for the sink (spark_groups.sink.pipeline).
        initial = BatchOffset.initial(self.options.pipeline).to_json()
        if self._last_end is None:  # Spark 4.0 asks for it after the first latestOffset()
            self._last_end = initial
        return initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as Spark admission control."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """Commit the finished batch ``start``, then plan the next one within ``limit``.

        Spark 4.0/4.1 pass neither: ``start`` is then what this reader returned last (or the
        newest entry of the query's offset log, in a restarted process) and the limit is
        ``maxOffsetsPerTrigger``."""
        if start is None:
            start = self._previous_end()
            max_records = self.options.max_offsets_per_trigger
        else:
            max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        log.debug("latestOffset(start batch %s, limit %s)", start.get("batch"), max_records)
        end: dict[str, Any] = self._driver().latest_offset(start, max_records)
        self._last_end = end
        return end

    def _previous_end(self) -> dict[str, Any]:
        """Spark 4.0/4.1: where the query stands (the end of its last planned batch)."""
        if self._last_end is None:
            assert self.options.checkpoint is not None  # required at load() on these versions
            logged = checkpoint.latest_logged(self.options.checkpoint, self.options.storage_options)
            self._last_end = (logged or BatchOffset.initial(self.options.pipeline)).to_json()
            log.info(
                "restarted on Spark %s: the query stands at batch %s (offset log)",
                SPARK_VERSION,
                self._last_end.get("batch"),
            )
        return self._last_end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Log end offsets seen at the last plan (lag) and the coordinator metrics, for the
        query progress (docs/metrics.md)."""
        return self._stream.report_latest() if self._stream is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read only what exists now, then end."""
        self._driver().prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The ranges of ``end`` split and packed into tasks (``spark_groups.read.tasks``). A
        batch planned here is read as planned; a batch Spark replays after a restart is read
        as far as it is still this member's (``spark_groups.group.replay``), in the pieces of
        its logged ranges."""
        log.debug("partitions(batch %s -> %s)", start.get("batch"), end.get("batch"))
        batch = BatchOffset.from_json(end)
        driver = self._driver()
        if self.options.at_most_once and not driver.planned_here(batch.batch):
            # A replay after a restart: its offsets were committed before it first ran, so
            # at-most-once means not reading it again.
            log.warning("at-most-once: skipping the replay of batch %d", batch.batch)
            return []
        to_read = driver.batch_to_read(batch)  # a replay reads what is still this member's
        tasks = plan_tasks(
            batch.ranges,
            to_read.ranges,
            self.options.records_per_task,
            self.options.min_partitions,
            self.options.max_records_per_partition,
        )
        log.debug("batch %d: %d ranges in %d tasks", batch.batch, len(to_read.ranges), len(tasks))
        return [RangesPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: read exactly the task's ranges as Arrow record batches."""
        from spark_groups.read.reader import read_ranges
        from spark_groups.spark.worker_logging import log_to_stderr

        log_to_stderr()  # an executor's worker: librdkafka's lines and ours to its stderr
        assert isinstance(partition, RangesPartition)
        return read_ranges(
            self.options.reader_config(),
            partition.ranges,
            include_headers=self.options.include_headers,
            max_batch_rows=self.options.arrow_batch_rows,
            poll_timeout_s=self.options.poll_timeout_ms / 1000.0,
            fail_on_data_loss=self.options.fail_on_data_loss,
            read_path=self.options.read_path,
            decode=self.decode.decoding if self.decode is not None else None,
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's own commit signal; offsets were committed at the safe point already."""
        log.debug("commit(batch %s)", end.get("batch"))
        if self._stream is not None:
            self._stream.commit_durable(BatchOffset.from_json(end))

    def stop(self) -> None:
        """Leave the group."""
        log.debug("stop()")
        if self._stream is not None:
            self._stream.stop()


def check_for_this_spark(
    options: SourceOptions, admission_control: bool = ADMISSION_CONTROL
) -> None:
    """Options this Spark cannot honour fail at ``load()`` (docs/spark-versions.md).

    Without admission control (Spark 4.0/4.1) Spark never tells a Python source where a
    restarted query stands; the source reads it from the query's offset log, so it needs the
    query's ``checkpointLocation``. The same option lets it commit the batch a query ends
    with (``Trigger.AvailableNow`` runs as one batch there, which Spark never commits)."""
    if admission_control or options.checkpoint is not None:
        return
    if options.flow_checkpoints is not None:  # found when the query starts
        return
    raise OptionNeedsSparkError(
        checkpoint.CHECKPOINT_OPTION,
        SPARK_VERSION,
        'the source needs the query\'s checkpoint: add .option("checkpointLocation", ...) '
        "to readStream with the same path as writeStream's (Spark before 4.2 does not tell a "
        "Python source where a restarted query stands, nor when its last batch finished)",
    )


class KafkaGroupDataSource(DataSource):
    """``spark.readStream.format("kafka-group")``: Kafka records read as a group member."""

    def __init__(self, options: dict[str, str]) -> None:
        planner_accumulators.quiet()  # Spark 4.2+ planner workers (the module's doc)
        super().__init__(options)
        self.parsed = parse_options(options)
        self.decode: DecodePlan | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled in a planner worker: :func:`planner_accumulators.quiet` first."""
        planner_accumulators.quiet()
        self.__dict__.update(state)

    @classmethod
    def name(cls) -> str:
        """The short format name."""
        return FORMAT

    def schema(self) -> str:
        """The columns of Spark's kafka source (``headers`` with ``includeHeaders=true``),
        ``key`` and ``value`` typed by their reader schemas with ``key.format`` or
        ``value.format`` (fixed now, from the registry)."""
        validate_client_config(self.parsed)
        check_for_this_spark(self.parsed)
        self._plan_decoding()
        if self.decode is None:
            return spark_ddl(self.parsed.include_headers)
        return ddl(self.decode.row_schema(arrow_schema(self.parsed.include_headers)))

    def _plan_decoding(self) -> None:
        if self.decode is None and self.parsed.formats.decoded:
            self.decode = plan_decoding(self.parsed)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """The stream reader (joins the group lazily, in the driver's reader process)."""
        self._plan_decoding()  # the reader schemas, when this instance did not answer schema()
        return KafkaGroupStreamReader(in_flow_checkpoint(self.parsed), self.decode)
