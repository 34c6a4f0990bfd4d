"""The ``delta-group`` sink's commit of a ``kafka-share`` batch: every record in the table once.

A share group delivers a record again when its lock ran out or it was released, so the table
cannot fence a partition by "up to where it is complete"; it remembers which offsets its
recent share commits wrote (``spark_groups.sink.share_info``) and leaves those out of a new
batch (:meth:`ShareCommit.commit`). The readers' acknowledgers then ACCEPT every record of
the task attempts the commit names, those left out included (``spark_groups.share.acks``).
docs/share-groups.md, "Exactly once in the table".
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from spark_groups import crash_points
from spark_groups.errors import SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.sink.attempt import SEARCHED_COMMITS, version_after
from spark_groups.sink.group_commit import DeltaSink
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.retry import wait_to_decide_again
from spark_groups.sink.share_info import (
    COMMIT_INFO_KEY,
    RecentOffsets,
    commit_info,
    commit_offsets_info,
)
from spark_groups.sink.sink_table import SinkTable, append_files, referenced
from spark_groups.sink.staged import StagedFiles
from spark_groups.sink.writer import KAFKA_COLUMNS, DataFile, TaskFileWriter, check_schema
from spark_groups.spark.task_context import TaskAttempt, take_read_note
from spark_groups.storage.transactions import transaction_versions

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

#: Prefix of the transaction app ids a share commit sets, one per partition it read.
SHARE_APP_ID_PREFIX = "spark_groups.share"
#: The commit info key counting the records a share commit left out as already there.
DUPLICATES_KEY = "spark_groups.share.duplicates"
#: The windows of recent commits, one per table, kept by the commit process.
_RECENT: dict[str, RecentOffsets] = {}


def share_app_id(table_id: str, group_id: str, tp: TopicPartition) -> str:
    """The transaction app id that orders the share commits of ``group_id`` reading ``tp``
    into one table (group id last: it may hold ``:``)."""
    return f"{SHARE_APP_ID_PREFIX}:{table_id}:{tp.topic}:{tp.partition}:{group_id}"


@dataclass(frozen=True)
class ShareTaskOutput:
    """What one task of a share batch wrote: who it was (``attempt``), the offsets of the
    rows it wrote (``offsets``), its files, and how many records its reader acquired
    (``acquired``: more than it wrote when the query filtered some out)."""

    attempt: TaskAttempt
    offsets: PartitionOffsets
    files: tuple[DataFile, ...] = ()
    acquired: int = 0


@dataclass(frozen=True)
class ShareCommitResult:
    """What :meth:`ShareCommit.commit` did: the table version (None: nothing committed, or
    the batch was there already), the offsets it wrote and those it left out as already in
    the table."""

    batch_id: int
    version: int | None
    written: PartitionOffsets
    duplicates: PartitionOffsets
    attempts: int = 1


class ShareCommit:
    """Commits share batches of ``group_id`` into ``table`` as ``member`` (module doc)."""

    def __init__(self, table: SinkTable, group_id: str, member: str, compression: str) -> None:
        """Describe the commit; nothing is read until :meth:`commit`."""
        self.table = table
        self.group_id = group_id
        self.member = member
        self.compression = compression

    def commit(
        self, plan: BatchPlan, tasks: Sequence[ShareTaskOutput], schema: pa.Schema
    ) -> ShareCommitResult:
        """Commit batch ``plan.batch_id`` of ``tasks``:

        1. **Check** the tasks' files: in storage with the size their task reported.
        2. **Open** the table at its newest version, one snapshot (created when missing).
        3. **Already there?** A recent commit holds this run's batch: nothing to do.
        4. **Decide**: offsets the recent commits wrote are left out, files rewritten without them.
        5. **Commit** the kept files, the commit info (the task attempts, the offsets written) and
           one transaction id per partition read, set one higher than the snapshot's: a concurrent
           share commit of the same partitions conflicts, and the batch is decided again from 2,
           at most :data:`~spark_groups.sink.retry.MAX_COMMIT_ATTEMPTS` times.
        6. **Clean up**: delete the files the commit does not reference.

        Raises :class:`~spark_groups.errors.SinkError` (nothing committed, the files deleted)."""
        crash_points.reached("sink.files_written")
        staged = StagedFiles(self.table, [f for t in tasks for f in t.files], self.compression)
        attempts = [t.attempt for t in tasks]
        read = PartitionOffsets()
        for t in tasks:
            read = read | t.offsets
        try:
            staged.check_exist()  # 1
            partition_by = self.table.partition_by_for(staged.files, self.table.latest())
            check_schema(schema, partition_by)
        except SinkError:
            staged.remove()
            raise
        recent = _RECENT.setdefault(self.table.uri, RecentOffsets())
        for attempt in itertools.count(1):
            snapshot = self.table.open(schema, partition_by, self.table.latest())  # 2
            recent.refresh(snapshot)
            first = attempts[0] if attempts else None
            if first is not None and recent.has_batch(first.run_id, first.batch_id):  # 3
                staged.remove(keep=_referenced(snapshot, staged))
                log.info("sink %s: share batch %d is in the table already", self.table.path,
                         plan.batch_id)  # fmt: skip
                return ShareCommitResult(plan.batch_id, None, PartitionOffsets(), read, attempt)
            in_table = recent.already_written(read)  # 4
            keep, duplicates = self._keep(staged, tasks, in_table)
            written = read - in_table
            if not any(t.acquired or t.offsets for t in tasks):  # nothing read: no commit
                staged.remove()
                return ShareCommitResult(plan.batch_id, None, written, duplicates, attempt)
            crash_points.reached("sink.commit_in_flight")
            info = self._info(plan, attempts, written, duplicates)
            if self._attempt(snapshot, plan, read, keep, partition_by, info):  # 5
                crash_points.reached("sink.committed")
                staged.remove(keep={f.path for f in keep})  # 6
                version = version_after(self.table, snapshot, info, [COMMIT_INFO_KEY])
                log.info(
                    "sink %s: share batch %d committed: %d record(s) of %d task attempt(s)%s",
                    self.table.path,
                    plan.batch_id,
                    written.records(),
                    len(attempts),
                    f"; {duplicates.records()} already in the table: {duplicates!r}"
                    if duplicates
                    else "",
                )
                return ShareCommitResult(plan.batch_id, version, written, duplicates, attempt)
            if not wait_to_decide_again(attempt, self.table.path, f"share batch {plan.batch_id}"):
                break
        staged.remove()
        raise SinkError(
            f"sink {self.table.path}: share batch {plan.batch_id} met concurrent commits "
            f"{attempt} times; nothing committed (its records come back when their locks run "
            "out)"
        )

    def _keep(
        self, staged: StagedFiles, tasks: Sequence[ShareTaskOutput], in_table: PartitionOffsets
    ) -> tuple[list[DataFile], PartitionOffsets]:
        """Step 4: the files to commit, those holding records ``in_table`` or written by an
        earlier task of the batch rewritten without them (two tasks of one batch hold one
        record when its lock ran out under the first: the broker gave it out again), and
        every record so left out."""
        keep: list[DataFile] = []
        left_out = PartitionOffsets()
        earlier = PartitionOffsets()
        for task in tasks:
            theirs = task.offsets & (in_table | earlier)
            earlier = earlier | task.offsets
            left_out = left_out | theirs
            for f in task.files:
                if theirs and any(
                    tp in theirs and any(k.min_offset <= o <= k.max_offset for o in theirs[tp])
                    for k in f.kafka
                    for tp in [k.topic_partition]
                ):
                    cut = staged.without(f, theirs)
                    if cut is not None:
                        keep.append(cut)
                else:
                    keep.append(f)
        return keep, left_out

    def _attempt(
        self,
        snapshot: DeltaTable,
        plan: BatchPlan,
        read: PartitionOffsets,
        keep: list[DataFile],
        partition_by: tuple[str, ...],
        info: dict[str, str],
    ) -> bool:
        """Step 5: True when committed, False on a conflict. Raises
        :class:`~spark_groups.errors.SinkError` on any other failure."""
        from deltalake import Transaction
        from deltalake.exceptions import CommitFailedError

        table_id = str(snapshot.metadata().id)
        ids = {share_app_id(table_id, self.group_id, tp): tp for tp in read}
        now = transaction_versions(snapshot, ids, self.table.storage_options)
        txns = [Transaction(a, now.get(a, 0) + 1) for a in sorted(ids)]
        try:
            append_files(snapshot, keep, partition_by, txns, info, hooks=True)
        except CommitFailedError:
            return False
        except Exception as exc:
            raise SinkError(
                f"sink {self.table.path}: share batch {plan.batch_id}: the commit failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return True

    def _info(
        self,
        plan: BatchPlan,
        attempts: list[TaskAttempt],
        written: PartitionOffsets,
        duplicates: PartitionOffsets,
    ) -> dict[str, str]:
        """The commit info of a share batch (step 5), with how many records it left out as
        already in the table (:data:`DUPLICATES_KEY`)."""
        return {
            DUPLICATES_KEY: str(duplicates.records()),
            "spark_groups.batch": str(plan.batch_id),
            "spark_groups.group": self.group_id,
            "spark_groups.member": self.member,
            **commit_info(attempts),
            **commit_offsets_info(written),
            "userMetadata": json.dumps({"group": self.group_id, "share": True}),
        }


class ShareStrategy:
    """A ``kafka-share`` batch (``spark_groups.sink.strategy``): each task notes its attempt
    and the offsets of its rows, and :meth:`ShareCommit.commit` commits them."""

    source = "kafka-share"

    def write_task(
        self, writer: TaskFileWriter, batches: Iterator[pa.RecordBatch]
    ) -> tuple[list[DataFile], ShareTaskOutput]:
        """Executor side: the task's files and its :class:`ShareTaskOutput`; a
        :class:`~spark_groups.errors.SinkError` (its files deleted) when no reader of this
        task attempt ran here: a shuffle stands between."""
        attempt = TaskAttempt.current()
        if attempt is None:
            raise SinkError(
                "kafka-share: this write runs outside a streaming batch's task (no batch id or "
                "run id in the TaskContext); write a share group's records with writeStream only"
            )
        noted: list[tuple[str, int, int]] = []
        files = writer.write(_noting_kafka_columns(batches, noted))
        acquired = take_read_note(attempt)
        if acquired is None:
            writer.discard()
            raise SinkError(
                f"kafka-share: the rows of {attempt} were not read by the same task: a "
                "shuffle (repartition, join, aggregation, ...) stands between the kafka-share "
                "source and the delta-group sink. A share group's records may be acknowledged "
                "only by the consumer that read them, once they are in the table, so the sink "
                "must write them in the task that read them: keep the query to row-by-row "
                "transformations (select, filter, withColumn, UDFs)"
            )
        offsets = PartitionOffsets.of((TopicPartition(t, p), o) for t, p, o in noted)
        return files, ShareTaskOutput(attempt, offsets, tuple(files), acquired)

    def commit(
        self, sink: DeltaSink, plan: BatchPlan, files: list[DataFile], notes: list[Any],
        schema: pa.Schema,
    ) -> int | None:  # fmt: skip
        """Driver side: :meth:`ShareCommit.commit` of the tasks' :class:`ShareTaskOutput`."""
        committer = ShareCommit(sink.table, sink.group_id, sink.member, sink.compression)
        return committer.commit(plan, cast(list[ShareTaskOutput], notes), schema).version


def _noting_kafka_columns(
    batches: Iterator[pa.RecordBatch], into: list[tuple[str, int, int]]
) -> Iterator[pa.RecordBatch]:
    """``batches``, keeping the topic, partition and offset of each row in ``into``."""
    for batch in batches:
        into.extend(zip(*(batch.column(c).to_pylist() for c in KAFKA_COLUMNS), strict=True))
        yield batch


def _referenced(snapshot: DeltaTable, staged: StagedFiles) -> set[str]:
    return referenced(snapshot, [f.path for f in staged.files] + sorted(staged.made))


def committed_share_batch(
    path: str, group_id: str, batch_id: int, storage_options: dict[str, str] | None = None
) -> bool:
    """Whether the table at ``path`` has a share commit of ``group_id``'s Spark batch
    ``batch_id`` among its newest :data:`SEARCHED_COMMITS` commits (a batch whose tasks
    acquired nothing has none)."""
    table = SinkTable(path, storage_options).load()
    if table is None:
        return False
    return any(
        info.get("spark_groups.batch") == str(batch_id)
        and info.get("spark_groups.group") == group_id
        and COMMIT_INFO_KEY in info
        for info in table.history(SEARCHED_COMMITS)
    )
