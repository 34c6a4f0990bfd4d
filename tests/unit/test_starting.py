"""The starting options: Spark's precedence, timestamps, and errors naming the option."""

from __future__ import annotations

import pytest

from spark_groups.errors import OptionError
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.starting import EARLIEST, LATEST, AtTimestamp, parse_starting

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_starting_timestamp_applies_to_every_partition() -> None:
    s = parse_starting({"startingTimestamp": "1700000000000"})
    assert s.for_partition(T0) == AtTimestamp(1_700_000_000_000)
    assert s.for_partition(TopicPartition("other", 9)) == AtTimestamp(1_700_000_000_000)
    assert s.timestamp_strategy == "error"


def test_by_timestamp_lists_partitions_and_the_rest_start_at_latest() -> None:
    s = parse_starting(
        {
            "startingOffsetsByTimestamp": '{"orders": {"0": 1000, "1": "2000"}}',
            "startingOffsetsByTimestampStrategy": "LATEST",
        }
    )
    assert s.for_partition(T0) == AtTimestamp(1000)
    assert s.for_partition(T1) == AtTimestamp(2000)
    assert s.for_partition(TopicPartition("orders", 2)) == LATEST
    assert s.timestamp_strategy == "latest"


def test_precedence_is_sparks_timestamp_then_by_timestamp_then_offsets() -> None:
    both = {
        "startingTimestamp": "5",
        "startingOffsetsByTimestamp": '{"orders": {"0": 7}}',
        "startingOffsets": "earliest",
    }
    assert parse_starting(both).for_partition(T0) == AtTimestamp(5)
    del both["startingTimestamp"]
    assert parse_starting(both).for_partition(T0) == AtTimestamp(7)
    del both["startingOffsetsByTimestamp"]
    assert parse_starting(both).for_partition(T0) == EARLIEST


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"startingTimestamp": "yesterday"}, "startingTimestamp", "milliseconds since the epoch"),
        ({"startingTimestamp": "-1"}, "startingTimestamp", "integer >= 0"),
        (
            {"startingOffsetsByTimestamp": '{"orders": {"0": -5}}'},
            "startingOffsetsByTimestamp",
            "orders-0: a timestamp",
        ),
        ({"startingOffsetsByTimestamp": "{oops"}, "startingOffsetsByTimestamp", "JSON like"),
        (
            {"startingOffsetsByTimestamp": '{"orders": {"x": 1}}'},
            "startingOffsetsByTimestamp",
            "not a number",
        ),
        (
            {"startingTimestamp": "1", "startingOffsetsByTimestampStrategy": "earliest"},
            "startingOffsetsByTimestampStrategy",
            "error, latest",
        ),
    ],
)
def test_bad_input_names_the_option(options: dict[str, str], option: str, words: str) -> None:
    with pytest.raises(OptionError, match=words) as caught:
        parse_starting(options)
    assert caught.value.option == option
