"""Packing a batch's ranges into Spark tasks (spark_groups.read.tasks): pure, no broker."""

from __future__ import annotations

import itertools
import random

import pytest

from spark_groups.offsets import BatchOffset, OffsetRange
from spark_groups.read.tasks import (
    DEFAULT_RECORDS_PER_TASK,
    MAX_RANGES_PER_TASK,
    clip_pieces,
    pack_ranges,
    packing_limit,
    plan_tasks,
    split_ranges,
)


def ranges_of(sizes: list[int], topic: str = "t") -> list[OffsetRange]:
    return [OffsetRange(topic, p, 1000, 1000 + n) for p, n in enumerate(sizes)]


def flat(tasks: tuple[tuple[OffsetRange, ...], ...]) -> list[OffsetRange]:
    return [r for task in tasks for r in task]


def test_small_ranges_are_packed_greedily_in_order() -> None:
    ranges = ranges_of([40, 30, 30, 20, 90, 10])
    tasks = pack_ranges(ranges, 100)
    assert [[r.partition for r in task] for task in tasks] == [[0, 1, 2], [3], [4, 5]]
    assert all(sum(r.size for r in task) <= 100 for task in tasks)


def test_a_range_of_n_or_more_records_is_a_task_of_its_own() -> None:
    ranges = ranges_of([10, 100, 20, 5000, 30])
    tasks = pack_ranges(ranges, 100)
    # The big ones go out where they come; the open task of small ones keeps filling.
    assert [[r.partition for r in task] for task in tasks] == [[1], [3], [0, 2, 4]]


def test_every_non_empty_range_is_in_exactly_one_task() -> None:
    rand = random.Random(17)
    for _ in range(200):
        sizes = [
            rand.choice([0, 1, 5, 50, 199, 200, 201, 5000]) for _ in range(rand.randint(0, 300))
        ]
        ranges = ranges_of(sizes, topic=rand.choice("ab"))
        n = rand.choice([1, 2, 100, 200, 1000, 10**9])
        cap = rand.choice([1, 3, 1000])
        tasks = pack_ranges(ranges, n, cap)
        assert sorted(flat(tasks)) == sorted(r for r in ranges if r.size > 0)
        assert all(task for task in tasks)
        for task in tasks:
            assert len(task) <= cap
            if len(task) > 1:
                assert sum(r.size for r in task) <= n
            # a task keeps the given order
            assert list(task) == sorted(task, key=ranges.index)


def test_the_same_batch_always_gives_the_same_tasks() -> None:
    """The checkpoint's offsets decide the tasks: a replay parses the same JSON again."""
    ranges = [
        OffsetRange(t, p, p * 7, p * 7 + (p % 13) * 31) for t in ("x", "y") for p in range(300)
    ]
    stored = BatchOffset.of(4, ranges).to_json()
    first = pack_ranges(BatchOffset.from_json(stored).ranges, 500)
    again = pack_ranges(BatchOffset.from_json(dict(stored)).ranges, 500)
    assert first == again
    assert len(first) < len([r for r in ranges if r.size])


def test_ranges_per_task_are_capped() -> None:
    ranges = ranges_of([1] * 2500)
    tasks = pack_ranges(ranges, 10**9)
    assert [len(task) for task in tasks] == [MAX_RANGES_PER_TASK, MAX_RANGES_PER_TASK, 500]
    assert [len(task) for task in pack_ranges(ranges, 10**9, 1)] == [1] * 2500


@pytest.mark.parametrize("n", [0, -5])
def test_zero_or_less_is_one_task_per_range(n: int) -> None:
    ranges = ranges_of([10, 0, 100_000, 3])
    assert pack_ranges(ranges, n) == tuple((r,) for r in ranges)


def test_one_record_per_task_is_one_task_per_non_empty_range() -> None:
    ranges = ranges_of([10, 0, 3])
    assert pack_ranges(ranges, 1) == ((ranges[0],), (ranges[2],))


def test_empty_ranges_make_no_task() -> None:
    assert pack_ranges(ranges_of([0, 0]), 100) == ()
    assert pack_ranges([], 100) == ()
    assert pack_ranges([], 0) == ()


def test_the_issue_case_1000_partitions_of_200_records() -> None:
    ranges = [OffsetRange(f"t{t}", p, 0, 200) for t in range(4) for p in range(250)]
    tasks = pack_ranges(ranges, DEFAULT_RECORDS_PER_TASK)
    assert len(tasks) == 2  # 200,000 records: two tasks of 500 ranges
    assert [len(task) for task in tasks] == [500, 500]


def test_bad_cap() -> None:
    with pytest.raises(ValueError, match="max_ranges_per_task"):
        pack_ranges(ranges_of([1]), 10, 0)


# --- Split ranges (minPartitions, maxRecordsPerPartition), then clip and pack (plan_tasks) ---


def spans(pieces: tuple[OffsetRange, ...] | list[OffsetRange]) -> list[tuple[int, int, int]]:
    return [(r.partition, r.from_offset, r.until_offset) for r in pieces]


def test_min_partitions_splits_one_range_evenly_bigger_pieces_last() -> None:
    assert spans(split_ranges([OffsetRange("t", 0, 1, 4)], 3)) == [(0, 1, 2), (0, 2, 3), (0, 3, 4)]
    assert spans(split_ranges([OffsetRange("t", 0, 1, 11)], 4)) == [
        (0, 1, 3),
        (0, 3, 5),
        (0, 5, 8),
        (0, 8, 11),
    ]


def test_min_partitions_splits_the_big_ranges_and_keeps_small_ones_whole() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 50)]
    # The 50 are a fifth of a share: whole, and out of the sums; the 1000 get the other 3.
    assert spans(split_ranges(ranges, 4)) == [
        (0, 0, 333),
        (0, 333, 666),
        (0, 666, 1000),
        (1, 0, 50),
    ]


def test_min_partitions_at_or_below_the_ranges_splits_nothing() -> None:
    ranges = ranges_of([10, 0, 500, 7])
    assert split_ranges(ranges, 3) == (ranges[0], ranges[2], ranges[3])  # empty ones left out


def test_max_records_per_partition_caps_every_piece() -> None:
    assert [r.size for r in split_ranges([OffsetRange("t", 0, 0, 250)], None, 100)] == [83, 83, 84]
    assert split_ranges([OffsetRange("t", 0, 0, 100)], None, 100) == (OffsetRange("t", 0, 0, 100),)


def test_both_options_split_by_records_first_then_to_min_partitions() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 250)], 6, 100)
    assert [r.size for r in pieces] == [41, 42, 41, 42, 42, 42]


def test_split_pieces_tile_each_range_in_order() -> None:
    rand = random.Random(5)
    for _ in range(300):
        ranges = ranges_of([rand.choice([0, 1, 2, 7, 100, 999, 4321]) for _ in range(20)])
        ranges = ranges[: rand.randint(0, 20)]
        min_parts = rand.choice([None, 1, 2, 7, 64, 1000])
        max_records = rand.choice([None, 2, 3, 50, 10**6])
        pieces = split_ranges(ranges, min_parts, max_records)
        by_partition: dict[int, list[OffsetRange]] = {}
        for p in pieces:
            by_partition.setdefault(p.partition, []).append(p)
        for r in ranges:
            mine = by_partition.get(r.partition, [])
            if r.size == 0:
                assert not mine
                continue
            assert mine[0].from_offset == r.from_offset and mine[-1].until_offset == r.until_offset
            assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(mine))
            assert all(p.size > 0 for p in mine)
            if max_records is not None and (min_parts is None or min_parts <= len(pieces)):
                assert all(p.size <= max_records for p in mine)
        if min_parts is not None:
            records = sum(r.size for r in ranges)
            assert len(pieces) >= min(min_parts, records) // 2  # "about" minPartitions


def test_bad_split_options() -> None:
    with pytest.raises(ValueError, match="min_partitions"):
        split_ranges(ranges_of([5]), 0)
    with pytest.raises(ValueError, match="max_records_per_partition"):
        split_ranges(ranges_of([5]), None, 0)


def test_one_partition_with_min_partitions_2_is_two_tasks_whatever_records_per_task() -> None:
    planned = [OffsetRange("t", 0, 0, 4_000_000)]
    tasks = plan_tasks(planned, planned, DEFAULT_RECORDS_PER_TASK, min_partitions=2)
    assert [spans(t) for t in tasks] == [[(0, 0, 2_000_000)], [(0, 2_000_000, 4_000_000)]]


def test_pieces_of_one_partition_never_share_a_task() -> None:
    planned = ranges_of([10, 10, 10])
    tasks = plan_tasks(planned, planned, 10**9, min_partitions=30)  # pieces of ~1 record
    assert len(tasks) >= 10
    for task in tasks:
        assert len({r.topic_partition for r in task}) == len(task)


def test_packing_keeps_min_partitions_tasks_and_max_records_per_task() -> None:
    planned = ranges_of([30] * 64)  # 1,920 records, no split needed for either option
    assert len(plan_tasks(planned, planned, 10**6)) == 1
    assert len(plan_tasks(planned, planned, 10**6, min_partitions=16)) == 16
    capped = plan_tasks(planned, planned, 10**6, max_records_per_partition=100)
    assert all(sum(r.size for r in task) <= 100 for task in capped)
    assert len(capped) == 22  # three ranges of 30 a task
    assert packing_limit(planned, 0, 16, 100) == 0  # recordsPerTask=0: no packing at all


def test_a_replay_reads_the_logged_pieces_or_parts_of_them() -> None:
    planned = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 1000)]
    first = plan_tasks(planned, planned, 100, min_partitions=8)
    assert [spans(t) for t in first][:4] == [
        [(0, 0, 250)],
        [(0, 250, 500)],
        [(0, 500, 750)],
        [(0, 750, 1000)],
    ]
    # Partition 1 was given up, partition 0 committed up to 600 by the time of the replay.
    to_read = [OffsetRange("t", 0, 600, 1000)]
    again = plan_tasks(planned, to_read, 100, min_partitions=8)
    assert [spans(t) for t in again] == [[(0, 600, 750)], [(0, 750, 1000)]]


def test_a_range_to_read_outside_the_logged_batch_is_refused() -> None:
    planned = [OffsetRange("t", 0, 0, 100)]
    with pytest.raises(ValueError, match="t-0"):
        clip_pieces(split_ranges(planned, 2), [OffsetRange("t", 0, 50, 150)])
    with pytest.raises(ValueError, match="t-1"):
        clip_pieces(split_ranges(planned, 2), [OffsetRange("t", 1, 0, 10)])


def test_without_split_options_plan_tasks_is_packing() -> None:
    planned = ranges_of([40, 0, 30, 5000])
    assert plan_tasks(planned, planned, 100) == pack_ranges(planned, 100)
    assert plan_tasks(planned, planned, 0) == pack_ranges(planned, 0)
