"""confluent-kafka's share consumer (KIP-932, Preview in librdkafka), as the share source uses it.

The only place outside ``kafka/`` code touches a ``ShareConsumer`` through: making one (with
explicit acknowledgement and this project's librdkafka logging) and settling records on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from spark_groups.kafka.logs import with_logger

log = logging.getLogger(__name__)


def create_share_consumer(config: Mapping[str, Any], topics: Iterable[str]) -> Any:
    """A ``ShareConsumer`` for ``config`` subscribed to ``topics``."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer(with_logger(config))
    consumer.subscribe(sorted(topics))
    return consumer


def settle(
    consumer: Any, records: Iterable[tuple[str, int, int]], accept: bool, timeout_s: float
) -> dict[str, str]:
    """ACCEPT (``accept``) or RELEASE every ``(topic, partition, offset)`` of ``records`` on
    ``consumer``, which acquired them, and commit that to the broker; the partitions whose
    acknowledgement the broker refused, with its error (``INVALID_RECORD_STATE``: the lock ran
    out first)."""
    from confluent_kafka import AcknowledgeType

    kind = AcknowledgeType.ACCEPT if accept else AcknowledgeType.RELEASE
    for topic, partition, offset in records:
        consumer.acknowledge_offset(topic, partition, offset, kind)
    answer = consumer.commit_sync(timeout_s) or {}
    return {f"{p.topic}-{p.partition}": str(e) for p, e in answer.items() if e is not None}


#: Kafka's default ``share.record.lock.duration.ms`` (the broker's
#: ``group.share.record.lock.duration.ms``).
DEFAULT_LOCK_MS = 30_000


def group_lock_ms(config: Mapping[str, Any], group: str, timeout_s: float = 10.0) -> int:
    """The acquisition lock of share group ``group`` (its ``share.record.lock.duration.ms``
    group config), or :data:`DEFAULT_LOCK_MS` when the broker does not say (logged)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(with_logger({k: v for k, v in config.items() if k != "group.id"}))
    try:
        (future,) = admin.describe_configs(
            [ConfigResource(ResourceType.GROUP, group)], request_timeout=timeout_s
        ).values()
        entry = future.result(timeout=timeout_s).get("share.record.lock.duration.ms")
        if entry is not None and entry.value is not None:
            return int(entry.value)
    except Exception as exc:
        log.warning(
            "share group %s: cannot read its share.record.lock.duration.ms (%s: %s); taking "
            "Kafka's default, %d ms",
            group,
            type(exc).__name__,
            exc,
            DEFAULT_LOCK_MS,
        )
    return DEFAULT_LOCK_MS
