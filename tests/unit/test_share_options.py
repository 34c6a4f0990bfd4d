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
    assert (parsed.tasks, parsed.max_records_per_task, parsed.formats.dead_letter_table) == (
        2, 10_000, "/lake/orders_dead"
    )  # fmt: skip
    assert parse_share_options(BASE).formats.dead_letter_table is None


def test_the_record_formats_of_kafka_group() -> None:
    parsed = parse_share_options(
        {**BASE, "value.format": "protobuf-confluent", "value.record.name": "shop.Order",
         "schema.registry.url": "http://r:8081", "schema.registry.basic.auth.user.info": "u:pw"}
    )  # fmt: skip
    value = parsed.formats.value
    assert (value.format, value.record_name, value.subjects(parsed.topics)) == (
        "protobuf-confluent", "shop.Order", ("orders-value",)
    )  # fmt: skip
    assert "u:pw" not in repr(parsed)
    assert parse_share_options(BASE).formats.decoded == ()


@pytest.mark.parametrize(
    ("options", "option", "says"),
    [
        ({**BASE, "deadLetter.table": "/lake/orders/"}, "deadLetter.table", "a table of their own"),
        ({k: v for k, v in BASE.items() if k != "sink.table"}, "sink.table", "is required"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "set by the"),
        ({**BASE, "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger", "unknown option"),
        ({**BASE, "value.format": "avro"}, "value.format", "protobuf-confluent"),
        ({**BASE, "value.format": "avro-confluent"}, "schema.registry.url", "is required"),
        ({**BASE, "schema.registry.url": "http://r:8081"}, "schema.registry.url", "applies only"),
    ],
)  # fmt: skip
def test_a_bad_option_is_named(options: dict, option: str, says: str) -> None:
    with pytest.raises(OptionError, match=says) as caught:
        parse_share_options(options)
    assert caught.value.option == option
