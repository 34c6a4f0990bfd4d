"""What the crash-point tests share: a plain consumer service of the group."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from broker_support import wait_until


class Service(threading.Thread):
    """A plain consumer service: processes each record (notes its id), commits what it
    processed after every poll and in its revocation callback."""

    def __init__(self, servers: str, topic: str, group: str, settings: dict, helper: Any) -> None:
        super().__init__(daemon=True)
        self.topic, self.helper = topic, helper
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **settings,
            }
        )
        self.ids: list[int] = []
        self.assigned = threading.Event()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self._done: dict[int, int] = {}

    def _commit(self, partitions: list[int]) -> None:
        offsets = [
            KafkaTopicPartition(self.topic, p, self._done[p]) for p in partitions if p in self._done
        ]
        if offsets:
            # A refused commit: its next owner reads those again (counted as overlap if so).
            with contextlib.suppress(KafkaException):
                self.consumer.commit(offsets=offsets, asynchronous=False)

    def _on_assign(self, consumer: Any, partitions: list) -> None:
        if self.helper is not None:
            self.helper.on_assign(consumer, partitions)
        self.assigned.set()

    def _on_revoke(self, consumer: Any, partitions: list) -> None:
        self._commit([p.partition for p in partitions])

    def run(self) -> None:
        try:
            self.consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke
            )
            while not self.stop_event.is_set():
                messages = self.consumer.consume(500, 0.1)
                for m in messages:
                    if m.error() is None:
                        self.ids.append(int(m.value()))
                        self._done[m.partition()] = m.offset() + 1
                self._commit(sorted({m.partition() for m in messages if m.error() is None}))
            self.consumer.close()
        except BaseException as exc:
            self.error = exc


def join_and_leave(
    servers: str, topic: str, group: str, settings: dict, done: Callable[[], bool] = bool
) -> None:
    """A consumer that joins the group (with an eager assignor every member's partitions are
    revoked) and leaves once it has an assignment or ``done()`` is true, committing nothing:
    what it fetched meanwhile is dropped and read by the partitions' next owner."""
    joiner = Consumer(
        {"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False, **settings}
    )
    joiner.subscribe([topic])
    try:
        wait_until(
            lambda: joiner.poll(0.1) is not False and (bool(joiner.assignment()) or done()),
            60,
            "the joiner's assignment",
        )
    finally:
        joiner.close()
