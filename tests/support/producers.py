"""Producers that run beside a test or a benchmark, in a thread: ids 0..total-1 at a steady
pace (:class:`FlowingProducer`), or ids until stopped, each acknowledged one noted
(:class:`IdProducer`)."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Producer


class FlowingProducer(threading.Thread):
    """Produces ids 0..total-1 round-robin over partitions, at a steady pace."""

    def __init__(
        self,
        servers: str,
        topic: str,
        partitions: int,
        total: int,
        per_s: int,
        config: dict[str, str] | None = None,
    ):
        super().__init__(daemon=True)
        self.config = config or {}
        self.servers, self.topic, self.partitions = servers, topic, partitions
        self.total, self.per_s = total, per_s
        self.done = threading.Event()

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.servers, "linger.ms": "5", **self.config})
        try:
            for i in range(self.total):
                data = str(i).encode()
                producer.produce(self.topic, key=data, value=data, partition=i % self.partitions)
                if i % 10 == 9:
                    producer.flush(10)
                    time.sleep(10 / self.per_s)
            producer.flush(30)
        finally:
            self.done.set()


class IdProducer(threading.Thread):
    """Produces ids 0, 1, 2, ... to the topic's partitions until stopped; remembers every id
    the broker acknowledged."""

    def __init__(self, servers: str, topic: str, partitions: int, per_second: int) -> None:
        super().__init__(daemon=True)
        self.servers, self.topic, self.partitions = servers, topic, partitions
        self.interval = 1.0 / per_second
        self.acked: set[int] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        # Idempotent: a retried send must not put one id at two offsets (a false duplicate).
        producer = Producer(
            {"bootstrap.servers": self.servers, "linger.ms": "5", "enable.idempotence": True}
        )

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.acked.add(int(message.value()))

        try:
            i = 0
            while not self.stop_event.is_set():
                producer.produce(
                    self.topic,
                    value=str(i).encode(),
                    partition=i % self.partitions,
                    on_delivery=delivered,
                )
                producer.poll(0)
                i += 1
                time.sleep(self.interval)
            # On a saturated machine (20 members beside it) the last batches took over 30 s.
            left = producer.flush(120)
            if left:
                raise RuntimeError(f"{left} records still undelivered 120 s after the last")
        except BaseException as exc:
            self.error = exc
        finally:
            producer.close()
