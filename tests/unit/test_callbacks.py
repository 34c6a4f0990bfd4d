"""librdkafka's callbacks and poll events as the member sees them, with a stand-in consumer:
no broker."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.errors import AuthenticationError, AuthorizationError, GroupMembershipError
from spark_groups.group.member.callbacks import Callbacks
from spark_groups.offsets import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def kafka(*partitions: TopicPartition) -> list[KafkaTopicPartition]:
    return [KafkaTopicPartition(p.topic, p.partition) for p in partitions]


class Event:
    """What ``poll()`` returns: an error event, or a record (no error)."""

    def __init__(self, error: KafkaError | None = None, topic: str = "t") -> None:
        self._error, self._topic = error, topic

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic


class StandInConsumer:
    """The part of a ``Consumer`` the callbacks use; records what was done to it."""

    def __init__(self, generation: int = 3, member_id: str = "m-1") -> None:
        self.generation, self.member_id = generation, member_id
        self.done: list[tuple[str, list[TopicPartition]]] = []
        self.events: list[Event] = []
        self.polls: list[float] = []
        self.subscribed: dict[str, Any] = {}

    def _record(self, what: str, partitions: list[KafkaTopicPartition]) -> None:
        self.done.append((what, [TopicPartition(p.topic, p.partition) for p in partitions]))

    def assign(self, partitions: list[KafkaTopicPartition]) -> None:
        self._record("assign", partitions)

    def incremental_assign(self, partitions: list[KafkaTopicPartition]) -> None:
        self._record("incremental_assign", partitions)

    def pause(self, partitions: list[KafkaTopicPartition]) -> None:
        self._record("pause", partitions)

    def memberid(self) -> str:
        return self.member_id

    def consumer_group_metadata(self) -> bytes:
        return b"CGMDv2:" + struct.pack("=i", self.generation) + b"g\x00m\x00\x00"

    def poll(self, timeout: float) -> Event | None:
        self.polls.append(timeout)
        return self.events.pop(0) if self.events else None

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscribed = {"topics": topics, **callbacks}


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = False

    def on_assigned(self, partitions: frozenset[TopicPartition], generation: int) -> None:
        self.calls.append(("assigned", partitions, generation))
        if self.fail:
            raise RuntimeError("listener failed")

    def on_revoked(
        self, partitions: frozenset[TopicPartition], serve: Callable[[float], None]
    ) -> None:
        serve(0.5)
        self.calls.append(("revoked", partitions))
        if self.fail:
            raise RuntimeError("listener failed")

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("lost", partitions))


class Member:
    """A Callbacks with what it is given recorded: served seconds, failures, closing."""

    def __init__(self, **config: str) -> None:
        self.served: list[float] = []
        self.failures: list[BaseException] = []
        self.closing = False
        self.listener = Listener()
        self.callbacks = Callbacks(
            {"group.id": "g1", **config},
            self.listener,
            serve=self.served.append,
            closing=lambda: self.closing,
            fail=self.failures.append,
            poll_interval_s=0.05,
        )


def test_an_eager_assignment_replaces_the_partitions_pauses_them_and_tells_the_listener() -> None:
    member, consumer = Member(), StandInConsumer(generation=3)
    callbacks = member.callbacks
    assert (callbacks.assignment, callbacks.generation, callbacks.member_id) == (set(), -1, "")
    callbacks.on_assign(consumer, kafka(T0, T1))
    consumer.generation = 4
    callbacks.on_assign(consumer, kafka(T2))
    assert consumer.done == [
        ("assign", [T0, T1]), ("pause", [T0, T1]), ("assign", [T2]), ("pause", [T2])
    ]  # fmt: skip
    assert callbacks.assignment == {T2}
    assert (callbacks.generation, callbacks.member_id, callbacks.rebalances) == (4, "m-1", 2)
    assert member.listener.calls == [("assigned", {T0, T1}, 3), ("assigned", {T2}, 4)]
    assert callbacks.first_assignment.is_set()


def test_a_cooperative_assignment_adds_and_an_empty_one_pauses_nothing() -> None:
    for config in (
        {"partition.assignment.strategy": "cooperative-sticky"},
        {"group.protocol": "consumer"},
    ):
        member, consumer = Member(**config), StandInConsumer()
        member.callbacks.on_assign(consumer, kafka(T0))
        member.callbacks.on_assign(consumer, [])
        member.callbacks.on_assign(consumer, kafka(T1))
        assert member.callbacks.assignment == {T0, T1}
        assert [what for what, _ in consumer.done] == [
            "incremental_assign", "pause", "incremental_assign", "incremental_assign", "pause"
        ]  # fmt: skip


def test_the_first_assignment_is_marked_even_when_the_listener_fails() -> None:
    member = Member()
    member.listener.fail = True
    with pytest.raises(RuntimeError, match="listener failed"):
        member.callbacks.on_assign(StandInConsumer(), kafka(T0))
    assert member.callbacks.first_assignment.is_set()
    assert member.callbacks.assignment == {T0}


def test_a_revocation_asks_the_listener_with_serve_then_drops_the_partitions() -> None:
    member, consumer = Member(), StandInConsumer(generation=5)
    callbacks = member.callbacks
    callbacks.on_assign(consumer, kafka(T0, T1))
    consumer.generation = 6
    callbacks.on_revoke(consumer, kafka(T0))
    assert member.listener.calls[-1] == ("revoked", {T0})
    assert member.served == [0.5]
    assert callbacks.assignment == {T1}
    assert callbacks.generation == 6  # a cooperative revocation comes with a new generation


def test_a_revocation_drops_the_partitions_even_when_the_listener_fails() -> None:
    member, consumer = Member(), StandInConsumer()
    member.callbacks.on_assign(consumer, kafka(T0, T1))
    member.listener.fail = True
    with pytest.raises(RuntimeError, match="listener failed"):
        member.callbacks.on_revoke(consumer, kafka(T0, T1))
    assert member.callbacks.assignment == frozenset()


def test_leaving_or_an_empty_revocation_does_not_ask_the_listener() -> None:
    member, consumer = Member(), StandInConsumer()
    member.callbacks.on_assign(consumer, kafka(T0, T1))
    member.callbacks.on_revoke(consumer, [])
    member.closing = True
    member.callbacks.on_revoke(consumer, kafka(T0, T1))
    assert [c[0] for c in member.listener.calls] == ["assigned"]
    assert member.callbacks.assignment == frozenset()


class ClosingConsumer(StandInConsumer):
    """A consumer inside ``close()``: librdkafka may never answer a request to the group's
    handler there (``memberid()``, ``consumer_group_metadata()``), and confluent-kafka holds
    the GIL while it waits; here such a call fails the test instead of freezing it."""

    def memberid(self) -> str:
        raise AssertionError("memberid() asked inside close()")

    def consumer_group_metadata(self) -> bytes:
        raise AssertionError("consumer_group_metadata() asked inside close()")


def test_a_leaving_member_asks_the_client_for_no_identity_and_tells_the_listener_nothing() -> None:
    """close() delivers the rebalance callbacks of a rebalance still under way: an assignment
    too (seen when another member joined as one stopped). The stream has stopped by then,
    and other threads read its state without the owner thread."""
    member, consumer = Member(), StandInConsumer(generation=2)
    member.callbacks.on_assign(consumer, kafka(T0))
    member.closing = True
    leaving = ClosingConsumer(generation=3)
    member.callbacks.on_assign(leaving, kafka(T1))
    member.callbacks.on_revoke(leaving, kafka(T0, T1))
    member.callbacks.on_lost(leaving, kafka(T1))
    assert leaving.done == [("assign", [T1]), ("pause", [T1])]  # librdkafka's request answered
    assert member.listener.calls == [("assigned", {T0}, 2)]  # nothing revoked or lost
    assert (member.callbacks.generation, member.callbacks.assignment) == (2, frozenset())


def test_lost_partitions_are_dropped_before_the_listener_hears_of_them() -> None:
    member, consumer = Member(), StandInConsumer()
    member.callbacks.on_assign(consumer, kafka(T0, T1))
    seen: list[frozenset[TopicPartition]] = []
    member.listener.on_lost = lambda lost: seen.append(member.callbacks.assignment)  # type: ignore[method-assign]
    member.callbacks.on_lost(consumer, kafka(T1))
    assert seen == [{T0}]


def test_subscribed_callbacks_reach_the_listener_and_never_poll() -> None:
    member, consumer = Member(), StandInConsumer()
    callbacks = member.callbacks
    callbacks.subscribe(consumer, ["t"])
    assert consumer.subscribed["topics"] == ["t"]
    seen: list[frozenset[TopicPartition]] = []
    member.listener.on_assigned = lambda partitions, generation: seen.append(partitions)  # type: ignore[method-assign]
    consumer.subscribed["on_assign"](consumer, kafka(T0))
    assert seen == [{T0}] and callbacks.assignment == {T0}
    assert consumer.polls == []  # no poll nested in a callback
    member.listener.on_lost = lambda lost: 1 / 0  # type: ignore[method-assign]
    with pytest.raises(ZeroDivisionError):
        consumer.subscribed["on_lost"](consumer, kafka(T0))
    assert callbacks.assignment == frozenset()


def test_refused_credentials_and_fatal_errors_stop_the_member_others_are_logged(caplog) -> None:
    member = Member(**{"sasl.username": "alice", "bootstrap.servers": "b:9092"})
    on_error = member.callbacks.on_error
    with caplog.at_level(logging.INFO, logger="spark_groups.group.member"):
        on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        on_error(KafkaError(KafkaError._TRANSPORT))
    assert member.failures == []
    assert "all brokers are down" in caplog.text
    on_error(KafkaError(KafkaError._AUTHENTICATION, "bad password"))
    on_error(KafkaError(KafkaError._FATAL, "fenced for good", fatal=True))
    refused, fatal = member.failures
    assert isinstance(refused, AuthenticationError) and refused.username == "alice"
    assert isinstance(fatal, GroupMembershipError) and fatal.group == "g1"
    assert "fatal consumer error: fenced for good" in str(fatal)


def test_poll_raises_the_events_that_must_stop_the_member(caplog) -> None:
    member, consumer = Member(), StandInConsumer()
    consumer.events = [
        Event(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), topic="secret"),
        Event(KafkaError(KafkaError._FATAL, "gone", fatal=True)),
        Event(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)),
        Event(KafkaError(KafkaError._TRANSPORT)),
        Event(),  # a record fetched before the pause landed: dropped
        None,
    ]
    with pytest.raises(AuthorizationError) as denied:
        member.callbacks.poll(consumer)
    assert denied.value.resource == "secret"
    with pytest.raises(GroupMembershipError, match="fatal consumer error"):
        member.callbacks.poll(consumer)
    with caplog.at_level(logging.WARNING, logger="spark_groups.group.member"):
        for _ in range(4):
            member.callbacks.poll(consumer)
    assert "subscribed topic is gone" in caplog.text
    assert consumer.polls == [0.05] * 6
