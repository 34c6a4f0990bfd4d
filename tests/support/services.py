"""A plain consumer service in a test's or a benchmark's group: confluent-kafka, in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition


class PlainService(threading.Thread):
    """A consumer service in the group (confluent-kafka): processes each record (notes its
    id and when it was read), commits what it processed after every poll and, synchronously,
    in its revocation callback, so the next owner starts right after it. Notes every
    assignment change with its time and generation. ``helper``: an object whose
    ``on_assign(consumer, partitions)`` runs first in each assignment callback (e.g.
    :class:`spark_groups.handover.SinkTableHandover`, as the crash tests use it)."""

    def __init__(
        self, servers: str, topic: str, group: str, settings: dict[str, str], helper: Any = None
    ) -> None:
        super().__init__(daemon=True, name="plain-service")
        self.topic, self.helper = topic, helper
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": group,
                "client.id": "rolling-service",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **settings,
            }
        )
        #: (id, partition, offset, read at (epoch s), produced at (epoch s)) per record.
        self.reads: list[tuple[int, int, int, float, float]] = []
        self.events: list[dict[str, Any]] = []
        self.commit_failures = 0
        self._processed: dict[int, int] = {}
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _generation(self) -> int:
        from spark_groups.group.member import parse_generation

        try:
            return parse_generation(self.consumer.consumer_group_metadata())
        except Exception:
            return -1

    def _note(self, event: str, partitions: list[KafkaTopicPartition]) -> None:
        self.events.append(
            {
                "event": event,
                "at": time.time(),
                "partitions": sorted(p.partition for p in partitions),
                "generation": self._generation(),
            }
        )

    def _commit(self, partitions: Iterable[int]) -> None:
        offsets = [
            KafkaTopicPartition(self.topic, p, self._processed[p])
            for p in partitions
            if p in self._processed
        ]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException:
            self.commit_failures += 1  # the next owner reads those records again

    @property
    def ids(self) -> list[int]:
        """The ids it processed, in order."""
        return [r[0] for r in self.reads]

    def _on_assign(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        if self.helper is not None:
            self.helper.on_assign(consumer, partitions)
        self._note("assigned", partitions)

    def _on_revoke(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        self._commit(p.partition for p in partitions)
        for p in partitions:
            self._processed.pop(p.partition, None)
        self._note("revoked", partitions)

    def _on_lost(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        for p in partitions:
            self._processed.pop(p.partition, None)
        self._note("lost", partitions)

    def run(self) -> None:
        try:
            self.consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )  # fmt: skip
            while not self.stop_event.is_set():
                records = self.consumer.consume(500, 0.2)
                now = time.time()
                touched = set()
                for r in records:
                    if r.error() is not None:
                        continue
                    p, offset = r.partition(), r.offset()
                    assert p is not None and offset is not None
                    self.reads.append((int(r.value()), p, offset, now, r.timestamp()[1] / 1000))
                    self._processed[p] = offset + 1
                    touched.add(p)
                self._commit(touched)
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()  # the revocation callback commits, then it leaves

    def stop(self) -> None:
        """Stop, wait for it, raise what it failed with."""
        self.stop_event.set()
        self.join(60)
        if self.error is not None:
            raise RuntimeError(f"the plain consumer failed: {self.error}")
