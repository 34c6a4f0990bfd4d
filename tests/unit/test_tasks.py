"""Packing a batch's ranges into Spark tasks (spark_groups.read.tasks): pure, no broker."""

from __future__ import annotations

import random

import pytest

from spark_groups.offsets import BatchOffset, OffsetRange
from spark_groups.read.tasks import DEFAULT_RECORDS_PER_TASK, MAX_RANGES_PER_TASK, pack_ranges


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
