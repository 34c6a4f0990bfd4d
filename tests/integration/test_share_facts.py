"""What Apache Kafka's share groups (KIP-932) and confluent-kafka's ``ShareConsumer`` do, on
the suite's broker: the facts the ``kafka-share`` design (docs/share-groups.md) stands on.

Each test states one fact and fails when a broker or client release changes it. The group's
lock is shortened per group (``share.record.lock.duration.ms``; the suite's broker allows
1 s, Kafka's default minimum is 15 s) so that expiries take seconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ResourceType,
)

from support.broker import produce_ids
from support.share import poll_until, share_consumer, share_group

LOCK_MS = 3000


@pytest.fixture
def consumers(bootstrap_servers: str) -> Iterator[Callable[[str, str], ShareConsumer]]:
    """``make(group, topic)``: an explicit-acknowledgement share consumer, closed after."""
    made: list[ShareConsumer] = []

    def make(group: str, topic: str) -> ShareConsumer:
        consumer = share_consumer(bootstrap_servers, group, topic)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        with contextlib.suppress(Exception):  # closed by the test already
            consumer.close()


def test_the_suite_broker_runs_share_groups_with_kafkas_defaults(bootstrap_servers: str) -> None:
    """Kafka 4.3 formats storage with ``share.version`` 1 (no feature upgrade needed), and a
    group's share settings are group configs with Kafka's defaults: 5 deliveries, a 30 s
    lock, 2,000 records in flight per partition."""
    group = share_group(bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    configs = {k: v.value for k, v in future.result().items()}
    assert configs["share.auto.offset.reset"] == "earliest"
    assert configs["share.delivery.count.limit"] == "5"
    assert configs["share.record.lock.duration.ms"] == "30000"
    assert configs["share.partition.max.record.locks"] == "2000"


def test_a_lock_that_expires_gives_the_record_again_with_a_higher_count_and_refuses_the_late_ack(
    bootstrap_servers: str, make_topic: Callable[..., str], consumers: Callable[..., ShareConsumer]
) -> None:
    """A record not acknowledged within the lock comes back (delivery count 2, to any
    consumer), and the first consumer's ACCEPT after that is refused per partition
    (INVALID_RECORD_STATE in ``commit_sync``'s answer, not raised)."""
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(5), 1)
    group = share_group(bootstrap_servers, **{"share.record.lock.duration.ms": str(LOCK_MS)})
    first = consumers(group, topic)
    held = poll_until(first, 5)
    assert sorted(m.offset() for m in held) == list(range(5))
    assert {m.delivery_count() for m in held} == {1}
    second = consumers(group, topic)
    again = poll_until(second, 5)
    assert sorted(m.offset() for m in again) == list(range(5))
    assert {m.delivery_count() for m in again} == {2}
    for m in held:
        first.acknowledge(m, AcknowledgeType.ACCEPT)
    answer = first.commit_sync(10)
    assert answer
    assert all(
        isinstance(error, KafkaException) and error.args[0].name() == "INVALID_RECORD_STATE"
        for error in answer.values()
    )


def test_only_the_consumer_that_acquired_a_record_can_acknowledge_it(
    bootstrap_servers: str, make_topic: Callable[..., str], consumers: Callable[..., ShareConsumer]
) -> None:
    """Another consumer of the group cannot even queue an acknowledgement of it."""
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(3), 1)
    group = share_group(bootstrap_servers)
    holder = consumers(group, topic)
    held = poll_until(holder, 3)
    assert len(held) == 3
    other = consumers(group, topic)
    with pytest.raises(Exception, match="Erroneous state"):
        other.acknowledge_offset(topic, 0, held[0].offset(), AcknowledgeType.ACCEPT)
    for m in held:
        holder.acknowledge(m, AcknowledgeType.ACCEPT)
    assert all(error is None for error in holder.commit_sync(10).values())


def test_close_gives_unacknowledged_records_back_at_once(
    bootstrap_servers: str, make_topic: Callable[..., str], consumers: Callable[..., ShareConsumer]
) -> None:
    """A consumer closed with records it did not acknowledge releases them: the next
    consumer gets them well before the (default, 30 s) lock would have expired."""
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(3), 1)
    group = share_group(bootstrap_servers)
    first = consumers(group, topic)
    assert len(poll_until(first, 3)) == 3
    first.close()
    closed = time.monotonic()
    again = poll_until(consumers(group, topic), 3, timeout_s=20)
    assert time.monotonic() - closed < 20
    assert sorted(m.offset() for m in again) == [0, 1, 2]
    assert {m.delivery_count() for m in again} == {2}


def test_after_the_last_delivery_the_broker_drops_the_record(
    bootstrap_servers: str, make_topic: Callable[..., str], consumers: Callable[..., ShareConsumer]
) -> None:
    """With a delivery count limit of 2, a record released twice is archived: delivered with
    counts 1 and 2, then never again, and nothing tells a consumer. (Why the ``kafka-share``
    source sends a record's last delivery to the dead-letter table.)"""
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(2), 1)
    group = share_group(bootstrap_servers, **{"share.delivery.count.limit": "2"})
    counts = []
    for _ in range(2):
        consumer = consumers(group, topic)
        got = poll_until(consumer, 2)
        counts.append(sorted({m.delivery_count() for m in got}))
        for m in got:
            consumer.acknowledge(m, AcknowledgeType.RELEASE)
        consumer.commit_sync(10)
    assert counts == [[1], [2]]
    produce_ids(bootstrap_servers, topic, range(2, 3), 1)  # a later record still arrives
    last = poll_until(consumers(group, topic), 1)
    assert [(m.offset(), m.delivery_count()) for m in last] == [(2, 1)]
