"""confluent-kafka's share consumer (KIP-932, Preview in librdkafka), as the share source uses it.

The only place outside ``kafka/`` code touches a ``ShareConsumer`` through: making one (with
explicit acknowledgement and this project's librdkafka logging) and settling records on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spark_groups.kafka.logs import with_logger


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
