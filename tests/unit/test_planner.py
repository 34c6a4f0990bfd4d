"""Planning ranges from positions and ends; the JSON form of offsets."""

from __future__ import annotations

import pytest

from spark_groups.errors import SparkGroupsError
from spark_groups.group.planner import plan_ranges, wait_for_more
from spark_groups.offsets import BatchOffset, OffsetRange, TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_one_range_per_partition_with_new_records() -> None:
    plan = plan_ranges({A0: 10, A1: 5, B0: 7}, {A0: 20, A1: 5, B0: 9})
    assert plan.ranges == (OffsetRange("a", 0, 10, 20), OffsetRange("b", 0, 7, 9))
    assert plan.went_backwards == ()


def test_partitions_without_a_known_end_are_not_planned() -> None:
    assert plan_ranges({A0: 1, A1: 1}, {A0: 3}).ranges == (OffsetRange("a", 0, 1, 3),)


def test_limit_is_shared_in_proportion_to_backlog() -> None:
    plan = plan_ranges({A0: 0, A1: 0}, {A0: 300, A1: 100}, max_records=100)
    sizes = {r.partition: r.size for r in plan.ranges}
    assert sizes == {0: 75, 1: 25}
    assert sum(sizes.values()) <= 100


def test_small_limit_still_makes_progress_on_every_partition() -> None:
    plan = plan_ranges({A0: 0, A1: 0, B0: 0}, {A0: 1000, A1: 1000, B0: 1000}, max_records=2)
    assert [r.size for r in plan.ranges] == [1, 1, 1]


def test_limit_above_backlog_takes_everything() -> None:
    plan = plan_ranges({A0: 0}, {A0: 10}, max_records=1000)
    assert plan.ranges == (OffsetRange("a", 0, 0, 10),)


def test_end_below_position_is_reported() -> None:
    plan = plan_ranges({A0: 50}, {A0: 10})
    assert plan.ranges == ()
    assert plan.went_backwards == ((A0, 50, 10),)


def test_batch_offset_json_round_trip_is_canonical() -> None:
    ranges = [OffsetRange("b", 0, 1, 2), OffsetRange("a", 1, 5, 9), OffsetRange("a", 0, 0, 3)]
    batch = BatchOffset.of(4, ranges)
    as_json = batch.to_json()
    assert as_json == {
        "v": 1,
        "batch": 4,
        "ranges": {"a": {"0": [0, 3], "1": [5, 9]}, "b": {"0": [1, 2]}},
    }
    assert BatchOffset.from_json(as_json) == batch
    # Replay: the same JSON gives the same ranges in the same order.
    assert BatchOffset.from_json(as_json).ranges == BatchOffset.of(4, reversed(ranges)).ranges
    assert batch.ends() == {A0: 3, A1: 9, B0: 2}


def test_claims_ride_in_the_json_only_for_partitions_read() -> None:
    ranges = [OffsetRange("a", 0, 0, 3), OffsetRange("a", 1, 5, 9)]
    batch = BatchOffset.of(4, ranges, (), {A0: 7, A1: 8, B0: 9})  # b-0 is not read
    assert batch.to_json()["claims"] == {"a": {"0": 7, "1": 8}}
    assert BatchOffset.from_json(batch.to_json()) == batch
    assert batch.claim_map() == {A0: 7, A1: 8}
    assert "claims" not in BatchOffset.of(4, ranges).to_json()  # as before claims existed


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"v": 2, "batch": 0, "ranges": {}},
        {"a": {"0": 5}},
        {"v": 1, "batch": 0, "ranges": {"a": {"0": 5}}},
    ],
)
def test_foreign_offsets_are_refused(bad: dict) -> None:
    with pytest.raises(SparkGroupsError, match="not a spark_groups offset"):
        BatchOffset.from_json(bad)


def test_plan_counts_what_is_available_before_the_read_limit() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    plan = plan_ranges({a: 0, b: 10}, {a: 30, b: 20}, max_records=4)
    assert plan.available == 40
    assert sum(r.until_offset - r.from_offset for r in plan.ranges) == 4


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay() -> None:
    assert wait_for_more(5, 10, since_last_batch_s=1.0, max_delay_s=60.0)
    assert not wait_for_more(10, 10, since_last_batch_s=1.0, max_delay_s=60.0)
    assert not wait_for_more(5, 10, since_last_batch_s=60.0, max_delay_s=60.0)  # delay over
    assert not wait_for_more(5, 10, since_last_batch_s=None, max_delay_s=60.0)  # first batch
    assert not wait_for_more(0, None, since_last_batch_s=1.0, max_delay_s=60.0)  # no option
