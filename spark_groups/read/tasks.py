"""Which Spark task reads which offset ranges: a batch's ranges split and packed into tasks.

Pure and deterministic: a batch's tasks depend only on the ranges Spark logged for it, on what
of them is still to be read (a replay may read less) and on three options, so a replay reads
the same pieces. :func:`plan_tasks` splits (:func:`split_ranges`, ``maxRecordsPerPartition``
and ``minPartitions`` as Spark's kafka source means them), clips (:func:`clip_pieces`) and
packs (:func:`pack_ranges`, ``recordsPerTask``, within :func:`packing_limit`). Only which task
reads which records changes; the barrier, the ledger and the sink stay per Kafka partition.
docs/architecture.md, "Tasks: a batch's ranges split and packed".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from spark_groups.offsets import OffsetRange, TopicPartition

#: The default of the ``recordsPerTask`` option (docs/options.md explains the choice).
DEFAULT_RECORDS_PER_TASK = 100_000
#: Most ranges one task reads: each is a partition assigned to the task's one consumer.
MAX_RANGES_PER_TASK = 1_000

Task = tuple[OffsetRange, ...]


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> tuple[OffsetRange, ...]:
    """The non-empty ``ranges`` split into pieces, as Spark's kafka source splits them.

    * ``max_records_per_partition`` (``M``): a range of ``n`` offsets becomes
      ``ceil(n / M)`` pieces.
    * ``min_partitions`` (``P``), when there are fewer than ``P`` pieces after that: each
      piece's share of the records is ``size / total * P`` pieces, rounded half up and at
      least 1. Pieces whose share is 1 stay whole and are left out of the sums; the others are
      divided by their share of ``total - whole`` records over ``max(P - whole pieces, 1)``.
      So the batch reads in about ``P`` pieces, the biggest ranges in the most.

    A range of ``n`` offsets divided in ``k`` has pieces of ``n // k`` or ``n // k + 1``
    offsets (the bigger ones last), in offset order. The pieces keep the order of the ranges
    they come from; empty ranges are left out. Sizes count offsets, not records (compaction
    and transaction markers make some offsets hold none), as Spark counts them.
    """
    if min_partitions is not None and min_partitions < 1:
        raise ValueError(f"min_partitions must be >= 1, got {min_partitions}")
    if max_records_per_partition is not None and max_records_per_partition < 1:
        raise ValueError(f"max_records_per_partition must be >= 1, got {max_records_per_partition}")
    pieces = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        m = max_records_per_partition
        pieces = [p for r in pieces for p in _divide(r, -(-r.size // m))]
    if min_partitions is None or len(pieces) >= min_partitions:
        return tuple(pieces)
    total = sum(r.size for r in pieces)
    is_whole = [_share(r.size, total, min_partitions) == 1 for r in pieces]
    split_total = total - sum(r.size for r, w in zip(pieces, is_whole, strict=True) if w)
    split_parts = max(min_partitions - sum(is_whole), 1)
    return tuple(
        p
        for r, w in zip(pieces, is_whole, strict=True)
        for p in ((r,) if w else _divide(r, _share(r.size, split_total, split_parts)))
    )


def _share(size: int, total: int, parts: int) -> int:
    """``size / total * parts`` pieces, rounded half up, at least 1."""
    return max(math.floor(size / total * parts + 0.5), 1)


def _divide(rng: OffsetRange, parts: int) -> tuple[OffsetRange, ...]:
    """``rng`` in ``parts`` consecutive pieces of nearly equal size (the bigger ones last)."""
    pieces, start, remaining = [], rng.from_offset, rng.size
    for left in range(parts, 0, -1):
        n = remaining // left
        remaining -= n
        if n > 0:
            pieces.append(OffsetRange(rng.topic, rng.partition, start, start + n))
        start += n
    return tuple(pieces)


def packing_limit(
    planned: Iterable[OffsetRange],
    records_per_task: int,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> int:
    """The most records :func:`pack_ranges` puts in one task of the batch ``planned``:
    ``records_per_task``, lowered to ``max_records_per_partition`` and to the batch's
    records over ``min_partitions`` (rounded up), so that packing never undoes a split (a
    task holds at most ``maxRecordsPerPartition`` records, and the batch has at least about
    ``minPartitions`` tasks). ``records_per_task <= 0`` (no packing) stays as it is."""
    if records_per_task <= 0:
        return records_per_task
    limit = records_per_task
    if max_records_per_partition is not None:
        limit = min(limit, max_records_per_partition)
    if min_partitions is not None:
        total = sum(max(r.size, 0) for r in planned)
        limit = min(limit, max(-(-total // min_partitions), 1))
    return limit


def pack_ranges(
    ranges: Iterable[OffsetRange],
    records_per_task: int,
    max_ranges_per_task: int = MAX_RANGES_PER_TASK,
) -> tuple[Task, ...]:
    """The tasks that read ``ranges``, each a tuple of ranges.

    The rule, with ``N = records_per_task`` (a range's records counted as its
    :attr:`~spark_groups.offsets.OffsetRange.size`, its offsets):

    * ``N <= 0``: one task per range, empty ranges included.
    * Otherwise empty ranges are left out (they hold nothing to read), a range of ``N`` or more
      records is a task of its own, and the smaller ones are packed greedily in the given
      order: each goes into the open task unless that would take it past ``N`` records or
      ``max_ranges_per_task`` ranges, or the open task has a range of the same partition
      already (a consumer reads one range per partition), in which case the open task is
      closed and a new one opened. A task of its own is emitted where its range comes; the
      open task is emitted when it closes (and the last one at the end).

    Every non-empty range is in exactly one task, a task has at most one range per partition,
    and a task's ranges keep the given order. The same arguments always give the same tasks."""
    if max_ranges_per_task < 1:
        raise ValueError(f"max_ranges_per_task must be >= 1, got {max_ranges_per_task}")
    if records_per_task <= 0:
        return tuple((r,) for r in ranges)
    tasks: list[Task] = []
    open_task: list[OffsetRange] = []
    open_partitions: set[tuple[str, int]] = set()
    open_records = 0
    for rng in ranges:
        size = rng.size
        if size <= 0:
            continue
        if size >= records_per_task:
            tasks.append((rng,))
            continue
        if open_task and (
            open_records + size > records_per_task
            or len(open_task) >= max_ranges_per_task
            or (rng.topic, rng.partition) in open_partitions
        ):
            tasks.append(tuple(open_task))
            open_task, open_partitions, open_records = [], set(), 0
        open_task.append(rng)
        open_partitions.add((rng.topic, rng.partition))
        open_records += size
    if open_task:
        tasks.append(tuple(open_task))
    return tuple(tasks)


def clip_pieces(pieces: Iterable[OffsetRange], to_read: Sequence[OffsetRange]) -> list[OffsetRange]:
    """The parts of ``pieces`` (a batch's split ranges) inside ``to_read`` (at most one range
    per partition: what of the batch is still to be read). Pieces of partitions not in
    ``to_read`` are dropped; the others are cut to it.

    Raises ``ValueError`` when the pieces do not cover ``to_read`` (a range to read outside
    the batch's logged ranges): reading less than asked would lose records."""
    bounds = {r.topic_partition: r for r in to_read if r.size > 0}
    clipped: list[OffsetRange] = []
    covered: dict[TopicPartition, int] = {}
    for piece in pieces:
        bound = bounds.get(piece.topic_partition)
        if bound is None:
            continue
        start = max(piece.from_offset, bound.from_offset)
        until = min(piece.until_offset, bound.until_offset)
        if until > start:
            clipped.append(OffsetRange(piece.topic, piece.partition, start, until))
            covered[piece.topic_partition] = covered.get(piece.topic_partition, 0) + until - start
    short = [
        f"{tp} [{r.from_offset}, {r.until_offset})"
        for tp, r in bounds.items()
        if covered.get(tp, 0) != r.size
    ]
    if short:
        raise ValueError(f"ranges to read outside the batch's logged ranges: {', '.join(short)}")
    return clipped


def plan_tasks(
    planned: Sequence[OffsetRange],
    to_read: Sequence[OffsetRange],
    records_per_task: int = DEFAULT_RECORDS_PER_TASK,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> tuple[Task, ...]:
    """The tasks that read ``to_read`` of the batch whose logged ranges are ``planned``: its
    ranges split (:func:`split_ranges`), clipped to ``to_read`` (:func:`clip_pieces`) and
    packed (:func:`pack_ranges` within :func:`packing_limit`), as the module doc says. A batch
    read as planned passes the same ranges twice."""
    if min_partitions is None and max_records_per_partition is None:
        pieces: tuple[OffsetRange, ...] = tuple(planned)  # no split option: the logged ranges
    else:
        pieces = split_ranges(planned, min_partitions, max_records_per_partition)
    if list(to_read) != list(planned):
        pieces = tuple(clip_pieces(pieces, to_read))
    limit = packing_limit(planned, records_per_task, min_partitions, max_records_per_partition)
    return pack_ranges(pieces, limit)
