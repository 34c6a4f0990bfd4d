"""Share groups in tests: a fresh group with its configs, polling until records arrived."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Message, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)


def share_group(servers: str, **configs: str) -> str:
    """A fresh share group reading from the log start, with ``configs`` (group configs)."""
    group = f"share-{uuid.uuid4().hex[:8]}"
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {"share.auto.offset.reset": "earliest", **configs}.items()
    ]
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]
    ).values():
        future.result()
    return group


def share_consumer(servers: str, group: str, topic: str) -> ShareConsumer:
    """An explicit-acknowledgement share consumer of ``group``, subscribed to ``topic``."""
    consumer = ShareConsumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    return consumer


def poll_until(consumer: ShareConsumer, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Poll until ``count`` records arrived (or the deadline); their records."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += [m for m in consumer.poll(0.5) if m.error() is None]
    return got
