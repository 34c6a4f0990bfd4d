"""Shared fixtures: one broker per test session (embedded, or BOOTSTRAP_SERVERS)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from spark_groups.embedded import EmbeddedBroker


@pytest.fixture(scope="session")
def bootstrap_servers() -> Iterator[str]:
    """A broker for the whole test run: ``$BOOTSTRAP_SERVERS`` or an embedded Tansu."""
    existing = os.environ.get("BOOTSTRAP_SERVERS")
    if existing:
        yield existing
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


@pytest.fixture
def make_topic(bootstrap_servers: str):
    """Create a fresh, uniquely named topic: ``make_topic(partitions=3) -> name``."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})

    def create(partitions: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=30)
        return name

    return create


@pytest.fixture(scope="session")
def mock_servers() -> Iterator[str]:
    """librdkafka's mock cluster (Kafka semantics); lives as long as its producer."""
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = owner.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    owner.flush(5)
