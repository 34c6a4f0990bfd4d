"""A member's subscription: matching and the check before subscribing, with a stand-in
consumer: no broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_groups.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnreachableError,
    TopicNotFoundError,
)
from spark_groups.group.member.topics import Subscription
from spark_groups.offsets import TopicPartition

CONFIG = {"group.id": "g1", "bootstrap.servers": "b:9092"}


@dataclass
class Topic:
    partitions: dict[int, object] = field(default_factory=dict)
    error: KafkaError | None = None


@dataclass
class Metadata:
    topics: dict[str, Topic]


def cluster(**topics: int) -> Metadata:
    return Metadata({name: Topic(dict.fromkeys(range(n))) for name, n in topics.items()})


class StandInConsumer:
    """Answers ``list_topics`` from ``metadata`` (all topics) or ``by_name``; fails while
    ``unreachable``."""

    def __init__(self, metadata: Metadata, by_name: dict[str, Topic] | None = None) -> None:
        self.metadata, self.by_name = metadata, by_name or {}
        self.unreachable = False
        self.events: list[Any] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Metadata:
        if self.unreachable:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        if topic is None:
            return self.metadata
        if topic not in self.by_name:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return Metadata({topic: self.by_name[topic]})

    def poll(self, timeout: float) -> Any:
        return self.events.pop(0) if self.events else None


def no_failure() -> BaseException | None:
    return None


def test_names_match_themselves_and_a_pattern_matches_every_topic_but_internal_ones() -> None:
    topics = {"orders": 0, "orders-eu": 0, "__consumer_offsets": 0, "__orders": 0}
    assert Subscription(["orders", "gone"], CONFIG, 1).matching(topics) == ["orders"]
    pattern = Subscription(["^_*orders.*"], CONFIG, 1)
    assert pattern.is_pattern
    assert pattern.matching(topics) == ["orders", "orders-eu"]
    assert not Subscription(["^a", "b"], CONFIG, 1).is_pattern


def test_subscribed_partitions_are_every_partition_of_every_match_in_order() -> None:
    metadata = cluster(b=2, a=1, c=1)
    assert Subscription(["b", "a"], CONFIG, 1).partitions(metadata) == [
        TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("b", 1)
    ]  # fmt: skip


def test_the_check_passes_when_every_named_topic_exists_and_a_pattern_always() -> None:
    consumer = StandInConsumer(cluster(a=1, b=1))
    Subscription(["a", "b"], CONFIG, 1).check(consumer, no_failure)
    Subscription(["^x"], CONFIG, 1).check(consumer, no_failure)


def test_a_missing_topic_is_named_and_a_denied_one_is_an_authorization_error() -> None:
    consumer = StandInConsumer(cluster(a=1), by_name={"hidden": Topic(error=None)})
    with pytest.raises(TopicNotFoundError, match="'gone', 'hidden' does not exist") as info:
        Subscription(["a", "gone", "hidden"], CONFIG, 1).check(consumer, no_failure)
    assert (info.value.topics, info.value.servers) == (("gone", "hidden"), "b:9092")
    denied = Topic(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    consumer = StandInConsumer(cluster(a=1), by_name={"secret": denied})
    with pytest.raises(AuthorizationError) as refused:
        Subscription(["a", "secret"], CONFIG, 1).check(consumer, no_failure)
    assert refused.value.resource == "secret"


def test_no_broker_answering_is_a_bounded_typed_error() -> None:
    consumer = StandInConsumer(cluster())
    consumer.unreachable = True
    with pytest.raises(BrokerUnreachableError, match=r"kafka\.bootstrap\.servers=b:9092") as info:
        Subscription(["a"], CONFIG, 0.2).check(consumer, no_failure)
    assert (info.value.servers, info.value.waited_s) == ("b:9092", 0.2)


def test_refused_credentials_end_the_check_at_once() -> None:
    consumer = StandInConsumer(cluster())
    consumer.unreachable = True
    refused = AuthenticationError("b:9092", "alice", "PLAIN", "bad password")
    with pytest.raises(AuthenticationError) as info:
        Subscription(["a"], CONFIG, 30).check(consumer, lambda: refused)
    assert info.value is refused
