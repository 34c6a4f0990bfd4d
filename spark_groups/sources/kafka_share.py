"""The Spark-facing ``kafka-share`` source (experimental): a share group's records, many tasks.

Nothing of a share group can be replayed by offset, so a batch's Spark offset is only its
number (and, for the sink, the group and table: ``BatchOffset.share``). Each batch runs
``tasks`` Spark tasks, each a share consumer that polls once (``spark_groups.share.read``) and
acknowledges from its Python worker once the sink's commit names its attempt
(``spark_groups.share.acks``), so ``spark.python.worker.reuse`` must stay true.
``Trigger.AvailableNow`` (Spark 4.2+) runs batches until one acquires nothing; before 4.2 it is
one batch. docs/share-groups.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from spark_groups import crash_points
from spark_groups.errors import OptionNeedsSparkError, SparkGroupsError
from spark_groups.formats.bad_records import SHARE_SCHEMA as SHARE_DEAD_LETTERS
from spark_groups.formats.decoder import DecodePlan, plan_decoding
from spark_groups.formats.spark_ddl import ddl
from spark_groups.kafka.share_client import ShareGroupSettings
from spark_groups.offsets import BatchOffset
from spark_groups.options.share import ShareOptions, parse_share_options
from spark_groups.read.schema import spark_ddl
from spark_groups.share.read import DELIVERY_COUNT, ShareTask, share_arrow_schema
from spark_groups.spark import planner_accumulators
from spark_groups.spark.compat import (
    ADMISSION_CONTROL,
    SPARK_VERSION,
    ReadAllAvailable,
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from spark_groups.storage import checkpoint

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.share_source")

#: The format name, for ``spark.readStream.format(...)``.
SHARE_FORMAT = "kafka-share"


class ShareTaskPartition(InputPartition):
    """One reading task of a share batch."""

    def __init__(self, task: ShareTask) -> None:
        super().__init__(task)

    @property
    def task(self) -> ShareTask:
        """What the task reads with."""
        return self.value


class KafkaShareStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Numbers the batches and makes each one's tasks (module doc)."""

    def __init__(self, options: ShareOptions, decode: DecodePlan | None = None) -> None:
        self.options = options
        self.decode = decode
        self._last: dict[str, Any] | None = None
        self._available_now = False
        self._group: ShareGroupSettings | None = None

    def _offset(self, batch: int) -> dict[str, Any]:
        return BatchOffset(batch=batch, pipeline=self.options.pipeline, share=True).to_json()

    def initialOffset(self) -> dict[str, Any]:
        """No batch yet."""
        return self._offset(-1)

    def getDefaultReadLimit(self) -> ReadLimit:
        """No limit but the tasks' own (``tasks`` x ``maxRecordsPerTask``)."""
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The next batch's number; under ``Trigger.AvailableNow``, ``start`` again (the
        query ends) once a batch acquired nothing."""
        previous = start if start is not None else self._previous_end()
        batch = int(previous.get("batch", -1))
        if batch >= 0:
            crash_points.reached("spark.commit_log")
        if self._available_now and batch >= 0 and not self._wrote(batch):
            return previous
        self._last = self._offset(batch + 1)
        crash_points.reached("planned")
        return self._last

    def _previous_end(self) -> dict[str, Any]:
        """Spark 4.0/4.1: the offset returned last, or the offset log's newest in a restarted
        process (returning Spark's last end again would run no batch)."""
        if self._last is None:
            o = self.options
            assert o.checkpoint is not None  # required at load() on these versions
            logged = checkpoint.latest_logged(o.checkpoint, o.storage_options)
            self._last = logged.to_json() if logged is not None else self.initialOffset()
        return self._last

    def _wrote(self, batch: int) -> bool:
        from spark_groups.sink.share_commit import committed_share_batch

        o = self.options
        return committed_share_batch(o.sink_path, o.group_id, batch, dict(o.storage_options))

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: batches until one acquires nothing."""
        self._available_now = True

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """``tasks`` share consumers."""
        o = self.options
        if self._group is None:  # once per reader: the group's settings, the dead letters' table
            from spark_groups.kafka.share_client import share_group_settings

            self._group = share_group_settings(o.consumer_config(), o.group_id)
            if o.formats.dead_letter_table is not None:
                from spark_groups.share.dead_letters import ensure_table

                ensure_table(o.formats.dead_letter_table, o.storage_options)
        lock_s = self._group.lock_ms / 1000
        task = ShareTask(
            config=o.consumer_config(),
            topics=list(o.topics),
            table=o.sink_path,
            poll_budget_s=min(o.poll_budget_ms / 1000, lock_s / 2),
            lock_s=lock_s,
            lock_margin_s=min(o.lock_margin_ms / 1000, lock_s / 2),
            include_headers=o.include_headers,
            storage_options=dict(o.storage_options),
            delivery_limit=self._group.delivery_limit,
            dead_letter_table=o.formats.dead_letter_table,
            decode=self.decode,
        )
        return [ShareTaskPartition(task) for _ in range(o.tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor side: poll, hand the records to the acknowledger, yield them."""
        from spark_groups.share.read import read_share_task
        from spark_groups.spark.task_context import TaskAttempt
        from spark_groups.spark.worker_logging import log_to_stderr

        log_to_stderr()
        if os.environ.get("SPARK_REUSE_WORKER") is None:
            raise SparkGroupsError(
                "kafka-share needs spark.python.worker.reuse=true (Spark's default): a task's "
                "records are acknowledged from its Python worker after the sink committed "
                "them, so the worker must outlive the task"
            )
        assert isinstance(partition, ShareTaskPartition)
        return read_share_task(partition.task, TaskAttempt.current())

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: the reading workers acknowledge once the table has the records."""


class KafkaShareDataSource(DataSource):
    """``spark.readStream.format("kafka-share")``: a share group's records (experimental)."""

    def __init__(self, options: dict[str, str]) -> None:
        planner_accumulators.quiet()
        super().__init__(options)
        self.parsed = parse_share_options(options)
        self.decode: DecodePlan | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled in a planner worker."""
        planner_accumulators.quiet()
        self.__dict__.update(state)

    @classmethod
    def name(cls) -> str:
        """The short format name."""
        return SHARE_FORMAT

    def schema(self) -> str:
        """The columns of Spark's kafka source (``key`` and ``value`` in their decoded types
        with a format) and ``deliveryCount``."""
        if not ADMISSION_CONTROL and self.parsed.checkpoint is None:
            raise OptionNeedsSparkError(
                checkpoint.CHECKPOINT_OPTION,
                SPARK_VERSION,
                'the source needs the query\'s checkpoint: add .option("checkpointLocation", '
                "...) to readStream with the same path as writeStream's (Spark before 4.2 does "
                "not tell a Python source where a restarted query stands)",
            )
        self._plan_decoding()
        if self.decode is None:
            return f"{spark_ddl(self.parsed.include_headers)}, {DELIVERY_COUNT} INT"
        return ddl(self.decode.row_schema(share_arrow_schema(self.parsed.include_headers)))

    def _plan_decoding(self) -> None:
        if self.decode is None and self.parsed.formats.decoded:
            self.decode = plan_decoding(self.parsed, SHARE_DEAD_LETTERS, SHARE_FORMAT)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """The stream reader."""
        self._plan_decoding()  # the reader schemas, when this instance did not answer schema()
        return KafkaShareStreamReader(self.parsed, self.decode)
