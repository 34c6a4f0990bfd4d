"""Committing and fetching the group's offsets, and how Kafka's answers become typed errors,
with a stand-in consumer: no broker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.errors import (
    AuthorizationError,
    CommitError,
    GroupMembershipError,
    StaleGenerationError,
)
from spark_groups.group.member import commits
from spark_groups.offsets import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
CONFIG = {"group.id": "g1", "bootstrap.servers": "b:9092"}


@dataclass
class Answer:
    """One partition of librdkafka's answer (its ``error`` cannot be set on the real type)."""

    topic: str
    partition: int
    offset: int = -1001
    metadata: str | None = None
    error: KafkaError | None = None


class StandInConsumer:
    """Answers ``commit`` and ``committed`` as told; records what it was sent."""

    def __init__(self, answer: list[Answer] | None = None, raises: KafkaError | None = None):
        self.answer, self.raises = answer, raises
        self.sent: list[list[KafkaTopicPartition]] = []

    def _reply(self, partitions: list[KafkaTopicPartition]) -> list[Answer] | None:
        self.sent.append(partitions)
        if self.raises is not None:
            raise KafkaException(self.raises)
        return self.answer

    def commit(self, offsets: list[KafkaTopicPartition], asynchronous: bool) -> Any:
        assert asynchronous is False
        return self._reply(offsets)

    def committed(self, partitions: list[KafkaTopicPartition], timeout: float) -> Any:
        return self._reply(partitions)


def on(consumer: StandInConsumer) -> Callable[..., Any]:
    """``call`` running its function at once, as on the owner thread."""

    def call(fn: Callable[[Any], Any], timeout_s: float = 60.0) -> Any:
        return fn(consumer)

    return call


def commit(consumer: StandInConsumer, offsets: dict[TopicPartition, int], **kw: Any) -> Any:
    kw.setdefault("generation", lambda: 7)
    return commits.commit(on(consumer), offsets, 30.0, config=CONFIG, **kw)


def test_a_commit_sends_every_offset_in_order_with_its_metadata() -> None:
    consumer = StandInConsumer(answer=[])
    assert commit(consumer, {T1: 20, T0: 10}, metadata="who") == {T0, T1}
    (sent,) = consumer.sent
    assert [(p.partition, p.offset, p.metadata) for p in sent] == [(0, 10, "who"), (1, 20, "who")]
    assert commit(consumer, {}) == frozenset()
    assert len(consumer.sent) == 1  # nothing to commit: no request


def test_owned_only_commits_what_is_still_owned_and_nothing_when_nothing_is() -> None:
    consumer = StandInConsumer(answer=[])
    asked: list[object] = []

    def owned(c: object) -> frozenset[TopicPartition]:
        asked.append(c)
        return frozenset({T1, T2})

    assert commit(consumer, {T0: 1, T1: 2}, owned=owned) == {T1}
    assert asked == [consumer]
    assert [p.partition for p in consumer.sent[0]] == [1]
    assert commit(consumer, {T0: 1}, owned=lambda c: frozenset()) == frozenset()
    assert len(consumer.sent) == 1


def test_a_refusal_for_the_generation_is_a_stale_generation_error_with_its_data() -> None:
    generations = iter([7, 8])
    consumer = StandInConsumer(raises=KafkaError(KafkaError.ILLEGAL_GENERATION))
    with pytest.raises(StaleGenerationError, match="for generation 7") as info:
        commit(consumer, {T0: 5}, generation=lambda: next(generations))
    error = info.value
    assert (error.generation, error.partitions, error.code) == (7, {T0}, 22)
    assert error.transient


def test_a_refusal_before_sending_names_the_current_generation() -> None:
    def refused(fn: Callable[[Any], Any], timeout_s: float = 60.0) -> Any:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))

    with pytest.raises(StaleGenerationError) as info:
        commits.commit(refused, {T0: 5}, 30.0, config=CONFIG, generation=lambda: 9)
    assert (info.value.generation, info.value.transient) == (9, False)


def test_other_commit_failures_are_commit_errors_and_denials_authorization_errors() -> None:
    consumer = StandInConsumer(raises=KafkaError(KafkaError.REQUEST_TIMED_OUT))
    with pytest.raises(CommitError, match="of t failed") as info:
        commit(consumer, {T0: 5, T1: 6})
    assert type(info.value) is CommitError
    assert (info.value.partitions, info.value.code) == ({T0, T1}, KafkaError.REQUEST_TIMED_OUT)
    consumer = StandInConsumer(raises=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(AuthorizationError) as denied:
        commit(consumer, {T0: 5})
    assert (denied.value.resource_type, denied.value.resource) == ("topic", "t")


def test_a_partition_refused_in_the_answer_is_a_typed_error_naming_it() -> None:
    fenced = KafkaError(KafkaError.FENCED_MEMBER_EPOCH)
    answer = [Answer("t", 0), Answer("t", 1, error=fenced), Answer("t", 2, error=fenced)]
    with pytest.raises(StaleGenerationError, match="t-1 for generation 7") as info:
        commit(StandInConsumer(answer=answer), {T0: 1, T1: 1, T2: 1})
    assert (info.value.partitions, info.value.code) == ({T1, T2}, KafkaError.FENCED_MEMBER_EPOCH)
    answer = [Answer("t", 0, error=KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE))]
    with pytest.raises(CommitError, match="offset commit failed for t-0") as other:
        commit(StandInConsumer(answer=answer), {T0: 1})
    assert type(other.value) is CommitError and other.value.partitions == {T0}
    answer = [Answer("t", 0, error=KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))]
    with pytest.raises(AuthorizationError) as denied:
        commit(StandInConsumer(answer=answer), {T0: 1})
    assert (denied.value.resource_type, denied.value.resource) == ("group", "g1")


def test_committed_leaves_out_partitions_with_no_commit() -> None:
    answer = [
        Answer("t", 0, 10, "who"),
        Answer("t", 1),  # nothing committed
        Answer("t", 2, 30),
    ]
    consumer = StandInConsumer(answer=answer)
    found = commits.committed_with_metadata(on(consumer), [T0, T1, T2], 5.0, config=CONFIG)
    assert found == {T0: (10, "who"), T2: (30, "")}
    assert commits.committed_with_metadata(on(consumer), [], 5.0, config=CONFIG) == {}
    assert len(consumer.sent) == 1


def test_a_failed_fetch_is_a_membership_error_and_a_denial_an_authorization_error() -> None:
    consumer = StandInConsumer(raises=KafkaError(KafkaError._TIMED_OUT))
    with pytest.raises(GroupMembershipError, match="could not fetch committed offsets") as info:
        commits.committed_with_metadata(on(consumer), [T0], 5.0, config=CONFIG)
    assert info.value.group == "g1"
    answer = [Answer("t", 0, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))]
    with pytest.raises(AuthorizationError):
        commits.committed_with_metadata(
            on(StandInConsumer(answer=answer)), [T0], 5.0, config=CONFIG
        )


def test_a_commit_is_cut_into_requests_under_the_byte_budget() -> None:
    partitions = [TopicPartition("topic", p) for p in range(100)]
    record = len("topic") + 10 + commits.RECORD_FRAMING_BYTES
    requests = commits.in_requests(partitions, "m" * 10, budget=record * 30)
    assert [len(r) for r in requests] == [30, 30, 30, 10]
    assert [tp for r in requests for tp in r] == partitions  # all, in order
    assert commits.in_requests(partitions[:3], "", budget=1) == [[tp] for tp in partitions[:3]]
    assert commits.in_requests([], "x") == []


def test_a_commit_is_cut_into_requests_of_at_most_so_many_partitions() -> None:
    partitions = [TopicPartition("topic", p) for p in range(1_201)]
    requests = commits.in_requests(partitions, "m", most=500)
    assert [len(r) for r in requests] == [500, 500, 201]
    assert [tp for r in requests for tp in r] == partitions
