"""Producers that run beside a test: ids at a steady pace, in a thread."""

from __future__ import annotations

import threading
import time

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
