"""How log lines and errors name partitions and positions (spark_groups.offsets)."""

from __future__ import annotations

from spark_groups.offsets import TopicPartition, partitions_text, positions_text


def test_partitions_text_is_short_for_many_partitions() -> None:
    many = [TopicPartition(f"t{t}", p) for t in range(4) for p in range(250)]
    assert partitions_text(many) == "t0 0-249; t1 0-249; t2 0-249; t3 0-249"


def test_partitions_text_joins_runs_topic_by_topic() -> None:
    some = [TopicPartition("b", 7), TopicPartition("a", 3), TopicPartition("a", 0)]
    some += [TopicPartition("a", 1), TopicPartition("a", 2), TopicPartition("a", 9)]
    assert partitions_text(some) == "a 0-3, 9; b 7"
    assert partitions_text([TopicPartition("a", 5)]) == "a 5"
    assert partitions_text([]) == "none"


def test_positions_text_names_each_partition_and_offset() -> None:
    text = positions_text({TopicPartition("orders", 1): 1051, TopicPartition("orders", 0): 989})
    assert text == "orders-0 989, orders-1 1051"


def test_the_resume_line_names_offsets_for_a_few_partitions_and_ranges_for_many() -> None:
    from spark_groups.group.arrivals import _resumed_text

    few = {TopicPartition("b", 0): 0, TopicPartition("b", 1): 5, TopicPartition("b", 2): None}
    many = {TopicPartition("a", p): 10 for p in range(30)}
    assert _resumed_text({"startingOffsets": few, "committed": many}) == (
        "a 0-29 from committed; b-0 0, b-1 5 (b 2 being revoked) from startingOffsets"
    )
