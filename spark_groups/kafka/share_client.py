"""confluent-kafka's share consumer (KIP-932, Preview in librdkafka), as the share source uses it.

The only place outside ``kafka/`` code touches a ``ShareConsumer`` through: making one (with
explicit acknowledgement and this project's librdkafka logging) and settling records on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
    return acknowledge(consumer, records, "ACCEPT" if accept else "RELEASE", timeout_s)


def acknowledge(
    consumer: Any,
    records: Iterable[tuple[str, int, int]],
    kind: str,
    commit_timeout_s: float | None,
) -> dict[str, str]:
    """Acknowledge every ``(topic, partition, offset)`` of ``records`` on ``consumer`` as
    ``kind`` (``ACCEPT``, ``RELEASE`` or ``REJECT``: archived, never given out again); commit
    that now when ``commit_timeout_s`` is given (the partitions the broker refused, with its
    error), else the consumer's next commit carries it (``{}``)."""
    from confluent_kafka import AcknowledgeType

    how = getattr(AcknowledgeType, kind)
    for topic, partition, offset in records:
        consumer.acknowledge_offset(topic, partition, offset, how)
    if commit_timeout_s is None:
        return {}
    answer = consumer.commit_sync(commit_timeout_s) or {}
    return {f"{p.topic}-{p.partition}": str(e) for p, e in answer.items() if e is not None}


#: Kafka's default ``share.record.lock.duration.ms`` (the broker's
#: ``group.share.record.lock.duration.ms``).
DEFAULT_LOCK_MS = 30_000
#: Kafka's default ``share.delivery.count.limit`` (the broker's
#: ``group.share.delivery.count.limit``).
DEFAULT_DELIVERY_LIMIT = 5


@dataclass(frozen=True)
class ShareGroupSettings:
    """What a share group's configuration says about its records: how long an acquisition
    lock lasts (``share.record.lock.duration.ms``) and on which delivery the broker gives a
    record out for the last time (``share.delivery.count.limit``: after it, a record that is
    RELEASEd or whose lock runs out is archived)."""

    lock_ms: int = DEFAULT_LOCK_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT


def share_group_settings(
    config: Mapping[str, Any], group: str, timeout_s: float = 10.0
) -> ShareGroupSettings:
    """The :class:`ShareGroupSettings` of share group ``group`` (its group configs, which
    fall back to the broker's ``group.share.*``), or Kafka's defaults when the broker does
    not say (logged)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(with_logger({k: v for k, v in config.items() if k != "group.id"}))
    try:
        (future,) = admin.describe_configs(
            [ConfigResource(ResourceType.GROUP, group)], request_timeout=timeout_s
        ).values()
        found = future.result(timeout=timeout_s)
    except Exception as exc:
        log.warning(
            "share group %s: cannot read its configuration (%s: %s); taking Kafka's defaults, "
            "share.record.lock.duration.ms=%d and share.delivery.count.limit=%d",
            group,
            type(exc).__name__,
            exc,
            DEFAULT_LOCK_MS,
            DEFAULT_DELIVERY_LIMIT,
        )
        return ShareGroupSettings()

    def value(name: str, default: int) -> int:
        entry = found.get(name)
        return int(entry.value) if entry is not None and entry.value is not None else default

    return ShareGroupSettings(
        lock_ms=value("share.record.lock.duration.ms", DEFAULT_LOCK_MS),
        delivery_limit=value("share.delivery.count.limit", DEFAULT_DELIVERY_LIMIT),
    )
