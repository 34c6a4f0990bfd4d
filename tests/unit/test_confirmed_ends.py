"""Log ends confirmed by a fetch (spark_groups.kafka.confirmed_ends): what is remembered and
forgotten, and the fetch that finds the log end Tansu's ListOffsets under-reports."""

from __future__ import annotations

import time
import uuid
from contextlib import closing

from spark_groups.kafka.client import Consumer, create_consumer
from spark_groups.kafka.confirmed_ends import ConfirmedEnds, fetch_high_watermarks
from spark_groups.kafka.list_offsets import LATEST, list_offsets
from spark_groups.offsets import TopicPartition

from support.broker import create_topic, produce_batches

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_nothing_remembered_everything_to_fetch() -> None:
    assert ConfirmedEnds().split({A: 101, B: 0}) == ({}, {A: 101, B: 0})


def test_a_confirmed_end_holds_while_the_listed_end_is_unchanged() -> None:
    confirmed = ConfirmedEnds()
    assert confirmed.confirm({A: 101, B: 0}, {A: 107, B: 0}) == {A: 107, B: 0}
    assert confirmed.split({A: 101, B: 0}) == ({A: 107, B: 0}, {})
    assert confirmed.split({A: 108, B: 0}) == ({B: 0}, {A: 108})  # a new batch on A


def test_never_below_the_listed_end() -> None:
    confirmed = ConfirmedEnds()
    assert confirmed.confirm({A: 10}, {A: 9}) == {A: 10}
    assert confirmed.split({A: 10}) == ({A: 10}, {})


def test_no_fetch_answer_keeps_the_listed_end_and_remembers_nothing() -> None:
    confirmed = ConfirmedEnds()
    assert confirmed.confirm({A: 101, B: 5}, {B: 6}) == {A: 101, B: 6}
    assert confirmed.split({A: 101, B: 5}) == ({B: 6}, {A: 101})


def test_forget_confirms_afresh() -> None:
    confirmed = ConfirmedEnds()
    confirmed.confirm({A: 1, B: 1}, {A: 20, B: 3})
    confirmed.forget([A, TopicPartition("never", 0)])
    assert confirmed.split({A: 1, B: 1}) == ({B: 3}, {A: 1})


def fetching_consumer(servers: str) -> tuple[closing[Consumer], dict[str, str]]:
    """A consumer set up as the resolver's (end-of-partition events on), and its config."""
    config = {
        "bootstrap.servers": servers,
        "group.id": "confirmed-ends-test",
        "enable.auto.commit": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "latest",
        "fetch.wait.max.ms": "10",
    }
    return closing(create_consumer(config)), config


def test_a_fetch_finds_the_end_tansu_under_reports(tansu_servers) -> None:
    topic = create_topic(tansu_servers, partitions=2)
    produce_batches(tansu_servers, topic, [50, 50, 7])  # partition 1 stays empty
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    owned, config = fetching_consumer(tansu_servers)
    deadline = time.monotonic() + 30
    with owned as consumer:
        listed = list_offsets(consumer, [p0, p1], LATEST, deadline, config=config, timeout_s=30)
        fetched = fetch_high_watermarks(consumer, listed, deadline, config=config, timeout_s=30)
        assert consumer.assignment() == []  # unassigned after
    assert listed == {p0: 101, p1: 0}  # the base offset of the last batch + 1
    assert fetched == {p0: 107, p1: 0}


def test_a_fetch_agrees_with_list_offsets_where_they_are_right(mock_servers) -> None:
    topic = f"ce-{uuid.uuid4().hex[:8]}"
    produce_batches(mock_servers, topic, [50, 50, 7])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    owned, config = fetching_consumer(mock_servers)
    deadline = time.monotonic() + 30
    with owned as consumer:
        listed = list_offsets(consumer, tps, LATEST, deadline, config=config, timeout_s=30)
        fetched = fetch_high_watermarks(consumer, listed, deadline, config=config, timeout_s=30)
    assert listed == {tps[0]: 107, tps[1]: 0}
    assert fetched == listed
