"""A ``kafka-group`` batch's commit, driver side: one Delta commit per batch, fenced per partition.

:meth:`DeltaSink.commit` turns the files a batch's tasks wrote (``spark_groups.sink.writer``)
and its plan (``spark_groups.sink.plan``) into one Delta commit that adds the files and sets
one transaction id per Kafka partition, its version the partition's next offset
(``spark_groups.sink.sink_table``). Each partition is decided against one snapshot's versions
and claims (``spark_groups.sink.decision``) and committed on that snapshot
(``spark_groups.sink.attempt``); a concurrent commit of the same partitions makes it decide
again (``spark_groups.sink.retry``), so two writers never both commit the same offsets. Files
are checked before the commit and deleted only when certainly not in the table
(``spark_groups.sink.staged``). No Spark here (``spark_groups.sink.spark`` adapts it); a
``kafka-share`` batch's commit is ``spark_groups.sink.share_commit``. docs/sink.md, "Design".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_groups import crash_points
from spark_groups.errors import SinkError
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.sink.attempt import COMMIT_INFO_KEYS, CommitAttempt, CommitUnknownError, Outcome
from spark_groups.sink.claim_tokens import claims_of
from spark_groups.sink.decision import BatchDecision, decide_batch
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.retry import wait_to_decide_again
from spark_groups.sink.sink_table import (
    APP_ID_PREFIX,
    SinkTable,
    app_id,
    committed_positions,
    referenced,
    versions,
)
from spark_groups.sink.staged import StagedFiles
from spark_groups.sink.writer import DataFile, TaskFileWriter, check_schema, remove_files

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

__all__ = [
    "APP_ID_PREFIX",
    "COMMIT_INFO_KEYS",
    "CommitResult",
    "DeltaSink",
    "app_id",
    "committed_positions",
]


@dataclass(frozen=True)
class CommitResult:
    """What :meth:`DeltaSink.commit` did with one batch.

    ``version`` is the table version of the commit (None when every partition was already
    in the table and nothing was committed). ``written`` holds, per partition committed, the
    range whose rows went in (it starts later than planned when part of it was already in the
    table); ``dropped`` the partitions whose rows were all in the table already.
    """

    batch_id: int
    version: int | None
    written: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    dropped: tuple[TopicPartition, ...] = ()
    fenced: tuple[TopicPartition, ...] = ()
    rows: int = 0
    files: int = 0
    attempts: int = 1


class DeltaSink:
    """The driver side of the ``delta-group`` sink for the table at ``path``.

    ``group_id`` is the consumer group of the source (part of every transaction app id).
    ``partition_by`` are the partition columns for a new table (None: take the existing
    table's, or none); ``merge_schema`` allows adding the query's new columns to the table;
    ``fail_on_gap`` refuses batches that would leave a gap; ``member`` names the writer in
    the commit info. One object may commit many batches, one at a time.
    """

    def __init__(
        self,
        path: str,
        group_id: str,
        *,
        storage_options: dict[str, str] | None = None,
        partition_by: Sequence[str] | None = None,
        merge_schema: bool = False,
        fail_on_gap: bool = True,
        member: str = "",
        compression: str = "snappy",
    ) -> None:
        """Describe the sink; nothing is read or written until a method is called."""
        self.path = path
        self.group_id = group_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.partition_by = tuple(partition_by) if partition_by is not None else None
        self.merge_schema = merge_schema
        self.fail_on_gap = fail_on_gap
        self.member = member
        self.compression = compression
        self.table = SinkTable(path, self.storage_options, self.partition_by, merge_schema)
        self._committer = CommitAttempt(self.table, group_id, member)
        self.uri = self.table.uri

    def __repr__(self) -> str:
        return f"DeltaSink(path={self.path!r}, group_id={self.group_id!r})"

    # ------------------------------------------------------------------ public API

    def table_partition_columns(self) -> tuple[str, ...] | None:
        """The existing table's partition columns, or None when there is no table yet."""
        return self.table.partition_columns()

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The table's next offset per partition for this group (see
        :func:`committed_positions`)."""
        return committed_positions(self.uri, self.group_id, partitions, self.storage_options)

    def abort(self, files: Iterable[DataFile]) -> None:
        """Delete the files of a batch Spark aborted, except those the table references.

        Spark also aborts a batch whose commit *call* failed after the Delta commit landed: those
        files are the table's. When the table cannot be read to tell, the files are kept (an
        orphan costs storage until ``vacuum``; a deleted referenced file breaks every reader)."""
        paths = [f.path for f in files]
        if not paths:
            return
        try:
            committed = referenced(self.table.load(), paths)
        except Exception as exc:
            log.warning(
                "sink %s: cannot read the table to tell whether the aborted batch landed (%s); "
                "its %d file(s) are kept (vacuum removes them if they are not in the table)",
                self.path,
                exc,
                len(paths),
            )
            return
        doomed = [p for p in paths if p not in committed]
        deleted = remove_files(self.uri, doomed, self.storage_options) if doomed else 0
        log.info(
            "sink %s: deleted %d file(s) of an aborted batch%s",
            self.path,
            deleted,
            f"; kept {len(committed)} the table references (its commit had landed)"
            if committed
            else "",
        )

    def commit(self, plan: BatchPlan, files: Sequence[DataFile], schema: pa.Schema) -> CommitResult:
        """Commit one batch: ``files`` (written by its tasks) under ``plan``, in one Delta
        commit with one transaction id per partition written. ``schema`` is the query's.

        1. **Check** the files (rows in their partition's planned range, in storage with the
           reported size), the query's columns and the partition columns.
        2. **Open** the table at its newest version, one snapshot (created when missing, features
           and partition columns checked, new columns added with ``mergeSchema``).
        3. **Decide** each partition against the snapshot: fenced, dropped, written (rows the
           table holds left out of its files), or a gap that refuses the batch.
        4. **Nothing to write**: delete the files, return.
        5. **Commit** the kept files and the transaction ids (and claims) on that snapshot; a
           conflict, or a failure certainly not in the table, goes back to 2, at most
           :data:`~spark_groups.sink.retry.MAX_COMMIT_ATTEMPTS` times.
        6. **Clean up**: delete the files the commit does not reference, return what went in.

        Raises :class:`~spark_groups.errors.SinkError` (nothing committed, the files deleted) for
        files outside the plan or missing, an incompatible table, a gap
        (:class:`~spark_groups.errors.SinkGapError`), or concurrent commits that kept winning;
        :class:`~spark_groups.sink.attempt.CommitUnknownError` (the files left in place) when the
        table cannot be read to tell whether a failed commit landed."""
        crash_points.reached("sink.files_written")
        staged = StagedFiles(self.table, files, self.compression)
        loaded, partition_by = self._check(plan, staged, schema)  # 1
        attempt = 0
        while True:
            attempt += 1
            snapshot, decision = self._open_and_decide(plan, staged, schema, partition_by, loaded)
            loaded = None  # 2, 3: a retry loads the table again
            if not decision.txns:  # 4
                return self._nothing_to_write(plan, staged, decision, attempt)
            self._before_commit(attempt, snapshot, decision)
            crash_points.reached("sink.commit_in_flight")
            if self._attempt(snapshot, plan, decision, partition_by, staged) == "ok":  # 5
                crash_points.reached("sink.committed")
                return self._clean_up(plan, staged, decision, attempt, snapshot)  # 6
            self._wait_to_retry(plan, staged, attempt)  # 5, a conflict: again from 2

    # ------------------------------------------------------------------ the steps

    def _check(
        self, plan: BatchPlan, staged: StagedFiles, schema: pa.Schema
    ) -> tuple[DeltaTable | None, tuple[str, ...]]:
        """Step 1: check the batch's files and schema; the table as loaded now (None: not
        there yet), which step 2 then uses, and the partition columns. On a
        :class:`~spark_groups.errors.SinkError` the files are deleted."""
        try:
            staged.check(plan)
            loaded = self.table.latest()
            partition_by = self.table.partition_by_for(staged.files, loaded)
            check_schema(schema, partition_by)
        except SinkError:
            self.abort(staged.files)
            raise
        return loaded, partition_by

    def _open_and_decide(
        self,
        plan: BatchPlan,
        staged: StagedFiles,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        loaded: DeltaTable | None,
    ) -> tuple[DeltaTable, BatchDecision]:
        """Steps 2 and 3: one snapshot of the table (``loaded`` when step 1 just loaded it),
        and the batch decided against it. Any error deletes the files and is raised as a
        :class:`~spark_groups.errors.SinkError`."""
        try:
            snapshot = self.table.open(schema, partition_by, loaded)
            decision = decide_batch(
                plan,
                versions(snapshot, self.group_id, plan.ranges, self.storage_options),
                staged.files,
                staged.cut,
                table_path=self.path,
                group_id=self.group_id,
                fail_on_gap=self.fail_on_gap,
                claims=claims_of(snapshot, self.group_id, plan.claims, self.storage_options),
            )
        except SinkError:
            staged.remove()
            raise
        except Exception as exc:
            staged.remove()
            raise SinkError(
                f"sink {self.path}: batch {plan.batch_id}: {type(exc).__name__}: {exc}"
            ) from exc
        return snapshot, decision

    def _nothing_to_write(
        self, plan: BatchPlan, staged: StagedFiles, decision: BatchDecision, attempt: int
    ) -> CommitResult:
        """Step 4: every partition is in the table already; delete the files."""
        staged.remove()
        log.info(
            "sink %s: batch %d: nothing to commit (already in the table: %s; claim moved on: %s)",
            self.path,
            plan.batch_id,
            _tp_list(decision.dropped),
            _tp_list(decision.fenced),
        )
        return CommitResult(
            plan.batch_id,
            None,
            dropped=tuple(decision.dropped),
            fenced=tuple(decision.fenced),
            attempts=attempt,
        )

    def _before_commit(self, attempt: int, table: DeltaTable, decision: BatchDecision) -> None:
        """Called between the decision and the commit (an extension point for tests)."""

    def _attempt(
        self,
        snapshot: DeltaTable,
        plan: BatchPlan,
        decision: BatchDecision,
        partition_by: tuple[str, ...],
        staged: StagedFiles,
    ) -> Outcome:
        """Step 5: commit on the decision's snapshot. A certain failure ("failed": the commit
        is not in the table) is tried again like a conflict; an unknown outcome keeps the
        files (they may be in the table) and raises."""
        try:
            return self._committer.attempt(snapshot, plan, decision, partition_by)
        except CommitUnknownError:
            raise
        except SinkError:
            staged.remove()
            raise

    def _wait_to_retry(self, plan: BatchPlan, staged: StagedFiles, attempt: int) -> None:
        """Step 5, after a conflict: wait before deciding again (``spark_groups.sink.retry``),
        or give up, deleting the files."""
        if not wait_to_decide_again(attempt, self.path, f"batch {plan.batch_id}"):
            staged.remove()
            last = self._committer.last_error
            raise SinkError(
                f"sink {self.path}: batch {plan.batch_id} failed {attempt} times on "
                "concurrent commits to the same partitions"
                + (f" or on errors (the last: {last})" if last else "")
                + "; nothing committed"
            )

    def _clean_up(
        self,
        plan: BatchPlan,
        staged: StagedFiles,
        decision: BatchDecision,
        attempt: int,
        snapshot: DeltaTable,
    ) -> CommitResult:
        """Step 6: the batch is committed on ``snapshot``; delete the files it does not
        reference."""
        version = self._committer.version_of(plan, decision, snapshot)
        staged.remove(keep={f.path for f in decision.keep})
        rows = sum(f.rows for f in decision.keep)
        log.info(
            "sink %s: batch %d committed as version %s: %d row(s) in %d file(s), ranges %s%s",
            self.path,
            plan.batch_id,
            version,
            rows,
            len(decision.keep),
            _ranges_text(decision.written),
            f"; already in the table: {_tp_list(decision.dropped)}" if decision.dropped else "",
        )
        return CommitResult(
            batch_id=plan.batch_id,
            version=version,
            written=dict(decision.written),
            dropped=tuple(decision.dropped),
            fenced=tuple(decision.fenced),
            rows=rows,
            files=len(decision.keep),
            attempts=attempt,
        )


class GroupStrategy:
    """A ``kafka-group`` batch (``spark_groups.sink.strategy``): the tasks add nothing to
    their files; :meth:`DeltaSink.commit` commits them against the plan's ranges."""

    source = "kafka-group"

    def write_task(
        self, writer: TaskFileWriter, batches: Iterator[pa.RecordBatch]
    ) -> tuple[list[DataFile], None]:
        return writer.write(batches), None

    def commit(
        self, sink: DeltaSink, plan: BatchPlan, files: list[DataFile], notes: list[Any],
        schema: pa.Schema,
    ) -> int | None:  # fmt: skip
        return sink.commit(plan, files, schema).version


def _ranges_text(ranges: Mapping[TopicPartition, OffsetRange]) -> str:
    return ", ".join(
        f"{tp} [{r.from_offset}, {r.until_offset})" for tp, r in sorted(ranges.items())
    )


def _tp_list(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in partitions) or "none"
