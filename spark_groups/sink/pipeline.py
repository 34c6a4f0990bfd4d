"""The table and the group a batch is written to, said once: by the source that planned it.

A ``kafka-group`` source writes its ``group.id`` and ``sink.table`` into every batch's Spark
offset (``BatchOffset.pipeline``), and the sink takes both from there: before any task writes
from the newest entry of the offset log (:func:`target_for_next_batch`, step 1), and at the
commit from the batch's own plan (:func:`check_target`, step 2: another table or group than
the tasks wrote to is refused, the files deleted). Given on the sink too, a value must agree
with the source's (:class:`~spark_groups.errors.PipelineMismatchError`); without one from the
source the sink's own options are required. docs/sink.md, "Said once: the table and the
group come from the source".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_groups.errors import OptionError, PipelineMismatchError, SinkError
from spark_groups.offsets import BatchOffset, Pipeline
from spark_groups.options.sink import SinkOptions
from spark_groups.sink.plan import pipeline_of
from spark_groups.storage.checkpoint import newest_entry, offset_log_path
from spark_groups.storage.object_stores import (
    STORAGE_PREFIX,
    check_commit_safety,
    one_writer_opt_in,
)


@dataclass(frozen=True)
class SinkTarget:
    """The table (``path``, resolved) and the consumer group (``group_id``) a batch is
    written for."""

    path: str
    group_id: str


def same_table(a: str, b: str) -> bool:
    """Whether two resolved table paths name the same table."""
    return a.rstrip("/") == b.rstrip("/")


def target_of(options: SinkOptions, pipeline: Pipeline | None, batch: int) -> SinkTarget:
    """The table and group of Spark batch ``batch``: the source's (``pipeline``) where it
    names them, else the sink's ``options``. Raises
    :class:`~spark_groups.errors.PipelineMismatchError` where both name one and they differ,
    and :class:`~spark_groups.errors.OptionError` where neither does."""
    path, group = options.path, options.group_id
    if pipeline is not None:
        if pipeline.sink is not None:
            if path is not None and not same_table(path, pipeline.sink):
                raise PipelineMismatchError("path", path, "sink.table", pipeline.sink, batch)
            if path is None:  # the sink's own storage.* options must make its commits safe
                check_commit_safety(
                    pipeline.sink, options.storage_options, "sink.table", prefix=STORAGE_PREFIX
                )
            path = pipeline.sink
        elif path is not None:
            check_named_by_source(path, options.storage_options)
        if group is not None and group != pipeline.group:
            raise PipelineMismatchError("group.id", group, "group.id", pipeline.group, batch)
        group = pipeline.group
        check_shared(options, pipeline, batch)
    if path is None:
        raise OptionError(
            "path",
            "the Delta table to write is required: .start(path), or the kafka-group source "
            "option sink.table, which this query's source does not set (the sink then takes "
            "the table from it)",
        )
    if group is None:
        raise OptionError(
            "group.id",
            "required: the consumer group of the kafka-group source that feeds this sink. "
            "A source of this release records it in every batch's offsets; those of this "
            "checkpoint do not (written by an older release), so give it to the sink",
        )
    return SinkTarget(path, group)


def check_named_by_source(path: str, storage_options: Mapping[str, str] | None) -> None:
    """A table committed to as check-then-rename (one writer only) must be the source's
    ``sink.table``: the source then holds the group to one member
    (``spark_groups.group.one_writer``). Raises :class:`~spark_groups.errors.OptionError`."""
    opt_in = one_writer_opt_in(path, storage_options)
    if opt_in is not None:
        raise OptionError(
            "path",
            f"the Delta table {path} is committed to as check-then-rename "
            f"(storage.{opt_in}=true), safe for one writer only, and the kafka-group source "
            "does not name it: set the source's sink.table to it (and drop the sink's path), "
            'so that the source refuses a second member of the group (docs/storage.md, "One '
            'writer"); nothing was written',
        )


def check_shared(options: SinkOptions, pipeline: Pipeline, batch: int) -> None:
    """The other settings both sides take must agree where both give them: the query's
    ``checkpointLocation`` and every ``storage.*`` option that holds no secret (credentials
    never travel in offsets: the sink needs its own). Raises
    :class:`~spark_groups.errors.PipelineMismatchError`."""
    if pipeline.checkpoint is not None and not same_table(options.checkpoint, pipeline.checkpoint):
        raise PipelineMismatchError(
            "checkpointLocation",
            options.checkpoint,
            "checkpointLocation",
            pipeline.checkpoint,
            batch,
        )
    mine = options.storage_options or {}
    for key, value in pipeline.storage:
        if key in mine and mine[key] != value:
            option = STORAGE_PREFIX + key
            raise PipelineMismatchError(option, mine[key], option, value, batch)


def target_for_next_batch(options: SinkOptions) -> tuple[SinkTarget, list[BatchOffset]]:
    """Step 1: the target of the batch about to run, and its sources' offsets, from the
    newest entry of the offset log in the sink's ``checkpointLocation``. Raises
    :class:`~spark_groups.errors.SinkError` when that entry holds no ``kafka-group`` offset."""
    entry = newest_entry(options.checkpoint, options.storage_options)
    if entry is None:  # nothing logged yet: the sink's own options
        return target_of(options, None, -1), []
    batch_id, offsets = entry
    if not offsets:
        raise SinkError(
            f"{offset_log_path(options.checkpoint, batch_id)}: batch {batch_id} has no "
            "kafka-group source offset: the delta-group sink only takes queries that read a "
            "kafka-group source (its batches' planned offsets are what make each record "
            "land once). Write other queries with format('delta') (delta-spark) or "
            "foreachBatch; nothing was written"
        )
    pipeline = pipeline_of([o.pipeline for o in offsets], batch_id)
    return target_of(options, pipeline, batch_id), offsets


def check_target(written: SinkTarget, planned: SinkTarget, batch: int) -> None:
    """Step 2: the tasks wrote to ``written``; the batch's plan says ``planned``. Raises
    :class:`~spark_groups.errors.PipelineMismatchError` when they differ (the caller deletes
    the files and commits nothing)."""
    if not same_table(written.path, planned.path):
        raise PipelineMismatchError("path", written.path, "sink.table", planned.path, batch)
    if written.group_id != planned.group_id:
        raise PipelineMismatchError(
            "group.id", written.group_id, "group.id", planned.group_id, batch
        )
