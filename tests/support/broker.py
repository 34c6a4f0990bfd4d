"""What the tests and the benchmarks need of the broker: which one it is, fresh names,
topics, producing, committed offsets, log ends, and waiting."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark_groups.kafka.list_offsets import list_offsets
from spark_groups.offsets import TopicPartition as OurTopicPartition
from spark_groups.offsets.starting import EARLIEST

#: Which broker the session starts: "kafka" (Apache Kafka, the default) or "tansu".
TEST_BROKER = os.environ.get("SPARK_GROUPS_TEST_BROKER", "kafka")


def broker_kind() -> str:
    """ "kafka", "tansu", or "external" (``BOOTSTRAP_SERVERS``) for this test run."""
    return "external" if os.environ.get("BOOTSTRAP_SERVERS") else TEST_BROKER


def unique(prefix: str) -> str:
    """A fresh name for a topic, group, query or folder: ``PREFIX_`` and 8 hex digits (a valid
    SQL identifier when ``prefix`` is one: memory sinks' query names)."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def create_topics(
    servers: str, partitions: int, names: Sequence[str], config: Mapping[str, str] | None = None
) -> list[str]:
    """Create the topics ``names`` on ``servers``, ``partitions`` partitions each (one
    replica, topic ``config``), and wait until the broker's metadata shows them and the broker
    leads every partition; returns ``names``. (The controller answers before the broker has
    made the partitions: right after a topic of 1,000 partitions, members of the next tests
    found their fresh topics missing.)"""
    admin = AdminClient({"bootstrap.servers": servers})
    topics = [NewTopic(n, partitions, 1, config=dict(config or {})) for n in names]
    for future in admin.create_topics(topics).values():
        future.result(timeout=60)

    def described() -> bool:
        known = admin.list_topics(timeout=30).topics
        return all(n in known and len(known[n].partitions) == partitions for n in names)

    wait_until(described, 120, f"the topics {list(names)} in the broker's metadata", poll_s=0.05)
    # And until the broker leads them: right after four topics of 2,500 partitions it answered
    # ListOffsets of the last one with NOT_LEADER_FOR_PARTITION for 9 s on a quiet machine,
    # and for over 30 s on a busy one, where members starting then failed their first batch.
    # The product's ListOffsets asks again while leadership moves, until its deadline.
    client = {"bootstrap.servers": servers, "group.id": "create-topics"}
    consumer = Consumer(client)
    try:
        tps = [OurTopicPartition(n, p) for n in names for p in range(partitions)]
        list_offsets(consumer, tps, EARLIEST, time.monotonic() + 120, config=client, timeout_s=120)
    finally:
        consumer.close()
    return list(names)


def create_topic(
    servers: str, partitions: int = 3, prefix: str = "t", config: Mapping[str, str] | None = None
) -> str:
    """Create a fresh topic, named :func:`unique` of ``prefix``; returns its name."""
    return create_topics(servers, partitions, [unique(prefix)], config)[0]


def produce(
    servers: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes]],
    chunk_sizes: Sequence[int] = (),
) -> dict[int, int]:
    """Produce ``(partition, key, value)`` records, flushing after each of ``chunk_sizes``
    records (so the log holds record batches of those sizes) and at the end; returns the
    records written per partition. Fails the test if any record is left unsent."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": "100"})
    counts: dict[int, int] = {}
    sizes = list(chunk_sizes)
    since_flush = 0
    for partition, key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition)
        counts[partition] = counts.get(partition, 0) + 1
        since_flush += 1
        if sizes and since_flush >= sizes[0]:
            assert producer.flush(30) == 0
            sizes.pop(0)
            since_flush = 0
    assert producer.flush(30) == 0
    return counts


def produce_ids(
    servers: str, topic: str, ids: Iterable[int], partitions: int, chunk_sizes: Iterable[int] = ()
) -> dict[int, int]:
    """Produce ``key=value=str(id)`` to partition ``id % partitions``; records per partition."""
    return produce(
        servers,
        topic,
        ((i % partitions, str(i).encode(), str(i).encode()) for i in ids),
        list(chunk_sizes),
    )


def produce_values(
    servers: str, topic: str, values: Sequence[bytes], partitions: int = 1
) -> dict[int, int]:
    """Produce ``values`` (no keys) round-robin over the first ``partitions`` partitions."""
    return produce(servers, topic, ((i % partitions, None, v) for i, v in enumerate(values)))


def produce_batches(servers: str, topic: str, sizes: Sequence[int], partition: int = 0) -> None:
    """One record batch of each size in ``sizes`` to ``partition`` (values ``b"0"``, ...)."""
    records = ((partition, None, b"%d" % i) for size in sizes for i in range(size))
    produce(servers, topic, records, sizes)


def committed_offsets(servers: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of ``topic`` in Kafka, by partition (none left out)."""
    admin = AdminClient({"bootstrap.servers": servers})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def log_end_offsets(servers: str, topic: str, partitions: int) -> dict[int, int]:
    """The log end offset of each of ``topic``'s first ``partitions`` partitions."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "log-ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float = 60.0,
    what: str | Callable[[], str] = "",
    poll_s: float = 0.2,
) -> None:
    """Ask ``condition`` every ``poll_s`` until it is true; :class:`AssertionError` (a failed
    test) after ``timeout_s``, saying ``what`` (called then, when it is a function)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {said or condition}")
        time.sleep(poll_s)
