"""The kafka-share source's options: what is required, what is refused, naming the option."""

from __future__ import annotations

import pytest

from spark_groups.errors import OptionError
from spark_groups.options.share import parse_share_options

BASE = {
    "kafka.bootstrap.servers": "broker:9092", "group.id": "q", "subscribe": "orders",
    "sink.table": "/lake/orders",
}  # fmt: skip


def test_the_defaults_and_a_dead_letter_table() -> None:
    parsed = parse_share_options({**BASE, "deadLetter.table": "/lake/orders_dead"})
    assert (parsed.tasks, parsed.max_records_per_task, parsed.dead_letter_path) == (
        2, 10_000, "/lake/orders_dead"
    )  # fmt: skip
    assert parse_share_options(BASE).dead_letter_path is None


@pytest.mark.parametrize(
    ("options", "option", "says"),
    [
        ({**BASE, "deadLetter.table": "/lake/orders/"}, "deadLetter.table", "a table of their own"),
        ({k: v for k, v in BASE.items() if k != "sink.table"}, "sink.table", "is required"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "set by the"),
        ({**BASE, "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger", "unknown option"),
    ],
)  # fmt: skip
def test_a_bad_option_is_named(options: dict, option: str, says: str) -> None:
    with pytest.raises(OptionError, match=says) as caught:
        parse_share_options(options)
    assert caught.value.option == option
