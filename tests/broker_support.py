"""Which broker the tests run on, and creating topics on it (importable from every test)."""

from __future__ import annotations

import os
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

#: Which broker the session starts: "kafka" (Apache Kafka, the default) or "tansu".
TEST_BROKER = os.environ.get("SPARK_GROUPS_TEST_BROKER", "kafka")


def broker_kind() -> str:
    """"kafka", "tansu", or "external" (``BOOTSTRAP_SERVERS``) for this test run."""
    return "external" if os.environ.get("BOOTSTRAP_SERVERS") else TEST_BROKER


def create_topic(servers: str, partitions: int = 3, prefix: str = "t") -> str:
    """Create a fresh, uniquely named topic on ``servers``; returns its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)
    return name
