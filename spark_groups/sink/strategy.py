"""How a batch is committed: a group commit or a share commit, chosen once per batch.

A ``kafka-group`` batch is fenced per partition by its planned ranges
(``spark_groups.sink.group_commit``); a ``kafka-share`` batch has no ranges and is
deduplicated by the offsets its tasks wrote (``spark_groups.sink.share_commit``). The two
differ in what a task adds to its commit message on the executor and in the driver's commit;
a :class:`CommitStrategy` holds both halves. The Spark adapter chooses it from the batch's
source offsets (:func:`strategy_for`) when the batch starts, and again from the batch's plan
before it commits: the two must agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import pyarrow as pa

from spark_groups.offsets import BatchOffset
from spark_groups.sink.group_commit import DeltaSink, GroupStrategy
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.share_commit import ShareStrategy
from spark_groups.sink.writer import DataFile, TaskFileWriter


class CommitStrategy(Protocol):
    """What differs between the kinds of batch. ``source``: the format whose batches it
    commits (for messages)."""

    source: str

    def write_task(
        self, writer: TaskFileWriter, batches: Iterator[pa.RecordBatch]
    ) -> tuple[list[DataFile], Any]:
        """Executor side: write one task's rows with ``writer``; its files and what its
        commit message adds to them (None: nothing)."""
        ...

    def commit(
        self,
        sink: DeltaSink,
        plan: BatchPlan,
        files: list[DataFile],
        notes: list[Any],
        schema: pa.Schema,
    ) -> int | None:
        """Driver side: commit the batch ``plan``, the tasks' ``files`` and ``notes``, into
        ``sink``'s table; the version committed (None: nothing new)."""
        ...


def strategy_for(offsets: Iterable[BatchOffset]) -> CommitStrategy:
    """The strategy of a batch whose sources logged ``offsets``: a share commit when a
    ``kafka-share`` source planned it, else a group commit."""
    return ShareStrategy() if any(o.share for o in offsets) else GroupStrategy()
