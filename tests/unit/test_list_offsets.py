"""ListOffsets for a set of partitions (spark_groups.kafka.list_offsets): the log end, the
log start and offsets by time, and its errors (an unknown topic, no answer in time)."""

from __future__ import annotations

import time
import uuid
from contextlib import closing
from typing import Any

import pytest

from spark_groups.embedded import free_port
from spark_groups.errors import BrokerUnreachableError, TopicNotFoundError
from spark_groups.kafka.client import Consumer, create_consumer
from spark_groups.kafka.list_offsets import list_offsets, partition_names
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.starting import EARLIEST, LATEST

from support.broker import create_topic, produce_batches

SECRET = "hunter2-do-not-show"


def consumer_for(config: dict[str, Any]) -> closing[Consumer]:
    """A consumer for ``config``, closed as the ``with`` block ends."""
    return closing(create_consumer({"group.id": "list-offsets-test", **config}))


def in_s(seconds: float) -> float:
    """A deadline ``seconds`` from now."""
    return time.monotonic() + seconds


def test_partition_names_shows_the_first_few() -> None:
    tps = [TopicPartition("t", p) for p in range(7)]
    assert partition_names(tps[:2]) == "t-0, t-1"
    assert partition_names(tps) == "t-0, t-1, t-2, t-3, t-4 and 2 more"


def test_log_end_and_start(mock_servers) -> None:
    topic = f"lo-{uuid.uuid4().hex[:8]}"
    produce_batches(mock_servers, topic, [50, 50, 7])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    config = {"bootstrap.servers": mock_servers}
    with consumer_for(config) as consumer:
        ends = list_offsets(consumer, tps, LATEST, in_s(30), config=config, timeout_s=30)
        starts = list_offsets(consumer, tps, EARLIEST, in_s(30), config=config, timeout_s=30)
    assert ends == {tps[0]: 107, tps[1]: 0}
    assert starts == {tps[0]: 0, tps[1]: 0}


def test_partitions_past_one_request_are_asked_in_several(bootstrap_servers, monkeypatch) -> None:
    from spark_groups.kafka import list_offsets as module

    monkeypatch.setattr(module, "REQUEST_PARTITIONS", 2)  # 5 partitions: 3 requests
    asked: list[int] = []
    topic = create_topic(bootstrap_servers, partitions=5)
    for p, count in enumerate([3, 1, 4, 1, 5]):
        produce_batches(bootstrap_servers, topic, [count], partition=p)
    tps = [TopicPartition(topic, p) for p in range(5)]
    config = {"bootstrap.servers": bootstrap_servers}
    with consumer_for(config) as consumer:

        class Counting:
            def offsets_for_times(self, request: list, timeout: float) -> list:
                asked.append(len(request))
                return consumer.offsets_for_times(request, timeout=timeout)

        ends = list_offsets(Counting(), tps, LATEST, in_s(30), config=config, timeout_s=30)  # type: ignore[arg-type]
    assert asked == [2, 2, 1]
    assert ends == dict(zip(tps, [3, 1, 4, 1, 5], strict=True))


def test_leadership_that_never_settles_is_named_at_the_deadline(bootstrap_servers) -> None:
    """A broker that answers, but never as the leader (a topic of thousands of partitions
    it has not finished making: NOT_LEADER_FOR_PARTITION for seconds), is asked again until
    the deadline; the error then says what the broker kept answering."""
    from spark_groups.kafka.client import KafkaError, KafkaException

    topic = create_topic(bootstrap_servers, partitions=1)
    tps = [TopicPartition(topic, 0)]
    config = {"bootstrap.servers": bootstrap_servers}
    asked: list[int] = []
    with consumer_for(config) as consumer:

        class NeverLeading:
            def offsets_for_times(self, request: list, timeout: float) -> list:
                asked.append(len(request))
                raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))

            def list_topics(self, topic: str, timeout: float) -> object:
                return consumer.list_topics(topic, timeout=timeout)

        with pytest.raises(BrokerUnreachableError, match="NOT_LEADER_FOR_PARTITION") as info:
            list_offsets(NeverLeading(), tps, LATEST, in_s(1.5), config=config, timeout_s=1.5)  # type: ignore[arg-type]
    assert len(asked) > 1 and info.value.servers == bootstrap_servers
    assert f"{topic}-0" in str(info.value) and "the last answer" in str(info.value)


def test_offsets_by_time(bootstrap_servers) -> None:
    topic = create_topic(bootstrap_servers, partitions=1)
    produce_batches(bootstrap_servers, topic, [5])
    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": bootstrap_servers}
    future_ms = int(time.time() * 1000) + 3_600_000
    with consumer_for(config) as consumer:
        first = list_offsets(consumer, [tp], {tp: 0}, in_s(30), config=config, timeout_s=30)
        late = list_offsets(consumer, [tp], {tp: future_ms}, in_s(30), config=config, timeout_s=30)
    assert first == {tp: 0}
    assert late == {tp: -1}  # no record that late: -1, not an error


def test_an_unknown_topic_is_named(bootstrap_servers) -> None:
    missing = f"no-such-topic-{uuid.uuid4().hex[:6]}"
    config = {"bootstrap.servers": bootstrap_servers}
    tps = [TopicPartition(missing, 0)]
    with consumer_for(config) as consumer, pytest.raises(TopicNotFoundError, match=missing) as info:
        list_offsets(consumer, tps, LATEST, in_s(10), config=config, timeout_s=10)
    assert (info.value.topics, info.value.servers) == ((missing,), bootstrap_servers)


def test_no_answer_in_time_names_the_servers_and_no_secret() -> None:
    servers = f"127.0.0.1:{free_port()}"
    config = {"bootstrap.servers": servers, "sasl.password": SECRET}
    started = time.monotonic()
    with consumer_for(config) as consumer, pytest.raises(BrokerUnreachableError) as info:
        list_offsets(
            consumer, [TopicPartition("t", 0)], LATEST, in_s(2), config=config, timeout_s=2
        )
    assert time.monotonic() - started < 10
    assert (info.value.servers, info.value.waited_s) == (servers, 2)
    assert "to list the end offsets of t-0" in str(info.value)
    assert SECRET not in str(info.value)
