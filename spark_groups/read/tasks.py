"""Which Spark task reads which offset ranges: a batch's ranges packed into tasks.

Pure and deterministic: the tasks of a batch depend only on its ranges (the checkpoint's
offsets, in :attr:`~spark_groups.offsets.BatchOffset.ranges` order) and the
``recordsPerTask`` option, so a replay reads the same records again. Packing changes only
how many tasks read them; the barrier, the ledger and the sink stay per Kafka partition.
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_groups.offsets import OffsetRange

#: The default of the ``recordsPerTask`` option (docs/options.md explains the choice).
DEFAULT_RECORDS_PER_TASK = 100_000
#: Most ranges one task reads: each is a partition assigned to the task's one consumer.
MAX_RANGES_PER_TASK = 1_000

Task = tuple[OffsetRange, ...]


def pack_ranges(
    ranges: Iterable[OffsetRange],
    records_per_task: int,
    max_ranges_per_task: int = MAX_RANGES_PER_TASK,
) -> tuple[Task, ...]:
    """The tasks that read ``ranges``, each a tuple of ranges.

    The rule, with ``N = records_per_task`` (a range's records counted as its
    :attr:`~spark_groups.offsets.OffsetRange.size`, its offsets):

    * ``N <= 0``: one task per range, empty ranges included (the behaviour before packing).
    * Otherwise empty ranges are left out (they hold nothing to read), a range of ``N`` or more
      records is a task of its own, and the smaller ones are packed greedily in the given
      order: each goes into the open task unless that would take it past ``N`` records or
      ``max_ranges_per_task`` ranges, in which case the open task is closed and a new one
      opened. A task of its own is emitted where its range comes; the open task is emitted
      when it closes (and the last one at the end).

    Every non-empty range is in exactly one task, and a task's ranges keep the given order.
    The same arguments always give the same tasks.
    """
    if max_ranges_per_task < 1:
        raise ValueError(f"max_ranges_per_task must be >= 1, got {max_ranges_per_task}")
    if records_per_task <= 0:
        return tuple((r,) for r in ranges)
    tasks: list[Task] = []
    open_task: list[OffsetRange] = []
    open_records = 0
    for rng in ranges:
        size = rng.size
        if size <= 0:
            continue
        if size >= records_per_task:
            tasks.append((rng,))
            continue
        if open_task and (
            open_records + size > records_per_task or len(open_task) >= max_ranges_per_task
        ):
            tasks.append(tuple(open_task))
            open_task, open_records = [], 0
        open_task.append(rng)
        open_records += size
    if open_task:
        tasks.append(tuple(open_task))
    return tuple(tasks)
