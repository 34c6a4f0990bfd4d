"""OffsetSet and PartitionOffsets: a share batch's offsets per partition, as ranges."""

from __future__ import annotations

import json
import random

from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import OffsetSet, PartitionOffsets


def test_offsets_become_the_fewest_ranges_whatever_their_order() -> None:
    s = OffsetSet.of([7, 3, 4, 5, 9, 8, 12, 4])
    assert s.ranges() == [(3, 6), (7, 10), (12, 13)]
    assert len(s) == 7
    assert list(s) == [3, 4, 5, 7, 8, 9, 12]
    assert str(s) == "[3, 6), [7, 10), 12"


def test_adjacent_and_overlapping_ranges_merge() -> None:
    assert OffsetSet([(0, 5), (5, 8), (2, 3), (10, 10)]).ranges() == [(0, 8)]


def test_membership_at_every_edge() -> None:
    s = OffsetSet([(10, 20), (30, 31)])
    assert [o in s for o in (9, 10, 19, 20, 29, 30, 31)] == [
        False, True, True, False, False, True, False,
    ]  # fmt: skip


def test_union_and_intersection_agree_with_python_sets() -> None:
    rng = random.Random(45)
    for _ in range(200):
        a = {rng.randrange(60) for _ in range(rng.randrange(40))}
        b = {rng.randrange(60) for _ in range(rng.randrange(40))}
        assert set(OffsetSet.of(a) | OffsetSet.of(b)) == a | b
        assert set(OffsetSet.of(a) & OffsetSet.of(b)) == a & b
        assert set(OffsetSet.of(a) - OffsetSet.of(b)) == a - b


def test_partition_offsets_round_trip_through_json() -> None:
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    po = PartitionOffsets.of([(p1, 4), (p0, 1), (p0, 2), (p1, 6), (p0, 0)])
    text = json.dumps(po.to_json())
    assert json.loads(text) == {"orders": {"0": [[0, 3]], "1": [[4, 5], [6, 7]]}}
    assert dict(PartitionOffsets.from_json(json.loads(text))) == dict(po)
    assert po.records() == 5


def test_partition_offsets_intersection_names_what_two_batches_share() -> None:
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    committed = PartitionOffsets({p0: OffsetSet([(0, 100)]), p1: OffsetSet([(0, 10)])})
    batch = PartitionOffsets({p0: OffsetSet([(95, 105)]), p1: OffsetSet([(10, 20)])})
    assert dict(committed & batch) == {p0: OffsetSet([(95, 100)])}
    assert dict(committed | batch) == {p0: OffsetSet([(0, 105)]), p1: OffsetSet([(0, 20)])}


def test_partition_offsets_difference_is_what_a_batch_adds() -> None:
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    batch = PartitionOffsets({p0: OffsetSet([(95, 105)]), p1: OffsetSet([(10, 20)])})
    there = PartitionOffsets({p0: OffsetSet([(0, 100)])})
    assert dict(batch - there) == {p0: OffsetSet([(100, 105)]), p1: OffsetSet([(10, 20)])}
    assert dict(there - there) == {}
