"""The driver's group member against a real broker: membership, pausing, threading."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from spark_groups.errors import BrokerUnreachableError, OptionError, TopicNotFoundError
from spark_groups.group.member import GroupMember, parse_generation
from spark_groups.offsets import TopicPartition

from support.broker import wait_until

FAST_GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}


@pytest.fixture
def member_factory(bootstrap_servers: str) -> Iterator[Callable[..., GroupMember]]:
    members: list[GroupMember] = []

    def make(topic: str, group: str, listener: object | None = None, **config: str) -> GroupMember:
        conf = {"bootstrap.servers": bootstrap_servers, "group.id": group, **FAST_GROUP}
        conf["partition.assignment.strategy"] = config.pop("strategy", "cooperative-sticky")
        conf.update(config)
        member = GroupMember(conf, [topic], listener)  # type: ignore[arg-type]
        members.append(member)
        return member.start()

    yield make
    for m in members:
        m.close()


def test_generation_is_parsed_from_group_metadata() -> None:
    blob = b"CGMDv2:" + (7).to_bytes(4, "little") + b"g\x00member\x00\x00"
    assert parse_generation(blob) == 7
    assert parse_generation(b"something else") == -1


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range", "roundrobin"])
def test_joins_owns_every_partition_and_never_fetches(
    bootstrap_servers: str, make_topic: Callable[..., str], member_factory, strategy: str
) -> None:
    topic = make_topic(3)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(30):
        producer.produce(topic, value=b"x", partition=i % 3)
    producer.flush(10)
    member = member_factory(topic, f"g-{uuid.uuid4().hex[:8]}", strategy=strategy)
    assert member.wait_for_assignment(30)
    wait_until(lambda: len(member.assignment) == 3, 30)
    assert member.member_id
    # Paused: the driver's consumer has consumed nothing.
    positions = member.call(lambda c: c.position([p for p in c.assignment()]), timeout_s=10)
    assert all(p.offset < 0 for p in positions), positions


def test_commit_and_committed_from_many_threads_while_polling(
    make_topic: Callable[..., str], member_factory
) -> None:
    topic = make_topic(2)
    member = member_factory(topic, f"g-{uuid.uuid4().hex[:8]}")
    assert member.wait_for_assignment(30)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(5):
                member.commit({TopicPartition(topic, n % 2): n * 100 + i})
                member.committed([TopicPartition(topic, 0)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert time.monotonic() - started < 30  # no thread hung inside the consumer
    committed = member.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert set(committed) == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


def test_a_commit_of_many_partitions_over_a_megabyte_of_offsets_lands(
    make_topic: Callable[..., str], member_factory
) -> None:
    """300 partitions with 3,900 bytes of commit metadata each (Kafka allows 4,096): in one
    request that is over ``__consumer_offsets``' 1 MB batch limit, which the broker refused
    ("Commit failed: Unknown broker error", found with 5,000 partitions in issue 45; 1,000
    partitions with a sink path of 1,000 characters do it too)."""
    topic = make_topic(300)
    member = member_factory(topic, f"g-{uuid.uuid4().hex[:8]}")
    assert member.wait_for_assignment(60)
    wait_until(lambda: len(member.assignment) == 300, 60)
    metadata = "m" * 3900
    offsets = {TopicPartition(topic, p): 5 for p in range(300)}
    assert member.commit(offsets, metadata=metadata) == frozenset(offsets)
    committed = member.committed_with_metadata(list(offsets))
    assert committed == {tp: (5, metadata) for tp in offsets}


def test_partitions_are_split_and_taken_back_after_leave(
    make_topic: Callable[..., str], member_factory
) -> None:
    topic = make_topic(4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = member_factory(topic, group)
    assert first.wait_for_assignment(30)
    wait_until(lambda: len(first.assignment) == 4, 30)
    second = member_factory(topic, group)
    wait_until(lambda: len(first.assignment) == 2 and len(second.assignment) == 2, 60)
    assert first.assignment.isdisjoint(second.assignment)
    left_at = time.monotonic()
    second.close()
    assert second.closed
    wait_until(lambda: len(first.assignment) == 4, 30)
    # LeaveGroup: taken back well before the 6 s session timeout would expire it.
    assert time.monotonic() - left_at < 6


class BlockingListener:
    """Holds a revocation until released, serving calls meanwhile (the barrier shape)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.revoking = threading.Event()

    def on_assigned(self, partitions: frozenset[TopicPartition], generation: int) -> None:
        pass

    def on_revoked(self, partitions: frozenset[TopicPartition], serve) -> None:
        self.revoking.set()
        while not self.release.is_set():
            serve(0.05)

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        pass


def test_blocking_revocation_still_serves_other_threads(
    make_topic: Callable[..., str], member_factory
) -> None:
    topic = make_topic(2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    listener = BlockingListener()
    first = member_factory(topic, group, listener)
    wait_until(lambda: len(first.assignment) == 2, 30)
    second = member_factory(topic, group)
    assert listener.revoking.wait(60)
    # Inside the revocation the partitions are still ours, and a commit goes through.
    revoked_owned = set(first.assignment)
    first.commit({tp: 42 for tp in revoked_owned})
    assert first.committed(revoked_owned) == {tp: 42 for tp in revoked_owned}
    listener.release.set()
    wait_until(lambda: len(second.assignment) >= 1, 60)
    assert first.assignment.isdisjoint(second.assignment)


def test_missing_topic_is_a_typed_error(bootstrap_servers: str) -> None:
    member = GroupMember({"bootstrap.servers": bootstrap_servers, "group.id": "g"}, ["no-such"])
    with pytest.raises(TopicNotFoundError, match="'no-such' does not exist") as info:
        member.start()
    assert info.value.topics == ("no-such",)
    assert info.value.servers == bootstrap_servers


def test_unreachable_broker_is_a_bounded_typed_error() -> None:
    member = GroupMember(
        {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}, ["t"], broker_timeout_s=2
    )
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match=re.escape("127.0.0.1:9")) as info:
        member.start()
    assert time.monotonic() - started < 15
    assert (info.value.servers, info.value.waited_s) == ("127.0.0.1:9", 2)


def test_bad_client_setting_is_an_option_error(bootstrap_servers: str) -> None:
    member = GroupMember(
        {"bootstrap.servers": bootstrap_servers, "group.id": "g", "no.such": "1"}, ["t"]
    )
    with pytest.raises(OptionError) as info:
        member.start()
    assert info.value.option == "kafka.no.such"
