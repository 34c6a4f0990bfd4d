"""How a batch is committed: a group commit or a share commit, chosen once per batch.

A group commit is fenced per partition by its planned ranges
(``spark_groups.sink.group_commit``); a share commit has no ranges and is deduplicated by the
offsets its tasks wrote (``spark_groups.sink.share_commit``). A :class:`CommitStrategy` holds
the two halves that differ: what a task adds to its commit message, and the driver's commit.
The Spark adapter chooses it from the batch's source offsets (:func:`strategy_for`) when the
batch starts, and again from its plan before it commits: the two must agree.
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
    """What differs between the kinds of batch; ``source``: the format that plans them."""

    source: str

    def write_task(
        self, writer: TaskFileWriter, batches: Iterator[pa.RecordBatch]
    ) -> tuple[list[DataFile], Any]:
        """Executor side: one task's files, and what its commit message adds (None: none)."""
        ...

    def commit(
        self, sink: DeltaSink, plan: BatchPlan, files: list[DataFile], notes: list[Any],
        schema: pa.Schema,
    ) -> int | None:  # fmt: skip
        """Driver side: the batch's one commit into ``sink``'s table; its version (None:
        nothing committed)."""
        ...


def strategy_for(offsets: Iterable[BatchOffset]) -> CommitStrategy:
    """A share commit for a batch a ``kafka-share`` source planned, else a group commit."""
    return ShareStrategy() if any(o.share for o in offsets) else GroupStrategy()
