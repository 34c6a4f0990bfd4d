"""Static membership (group.instance.id): a restarted member gets its partitions back.

The embedded broker does not implement static membership (partitions end up assigned to
nobody), so these run on librdkafka's mock cluster, and the "no rebalance for the others"
check on a real Kafka cluster only (BOOTSTRAP_SERVERS); see docs/brokers.md.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from spark_groups.group.member import GroupMember


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def static_pair(servers: str, topic: str) -> tuple[dict[str, str], Callable[[str], GroupMember]]:
    base = {
        "bootstrap.servers": servers,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "500",
        "partition.assignment.strategy": "cooperative-sticky",
    }

    def member(instance: str) -> GroupMember:
        return GroupMember({**base, "group.instance.id": instance}, [topic]).start()

    return base, member


def run_restart(servers: str, topic: str) -> tuple[GroupMember, GroupMember, frozenset, int]:
    _, member = static_pair(servers, topic)
    first, other = member("job-a"), member("job-b")
    wait_until(lambda: len(first.assignment) == 2 and len(other.assignment) == 2)
    owned, rebalances_before = first.assignment, other.rebalances
    first.close()  # a static member does not send LeaveGroup
    restarted = member("job-a")
    wait_until(lambda: len(restarted.assignment) == 2)
    return restarted, other, owned, rebalances_before


def test_restarted_static_member_gets_its_partitions_back(mock_servers: str) -> None:
    topic = f"static-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": mock_servers})
    producer.produce(topic, value=b"x")  # the mock cluster creates topics with 4 partitions
    assert producer.flush(10) == 0
    restarted, other, owned, _ = run_restart(mock_servers, topic)
    try:
        assert restarted.assignment == owned
        assert other.assignment.isdisjoint(owned)
    finally:
        restarted.close()
        other.close()


@pytest.mark.skipif(
    not os.environ.get("BOOTSTRAP_SERVERS"),
    reason="needs a real Kafka cluster (BOOTSTRAP_SERVERS): neither the embedded broker nor "
    "librdkafka's mock cluster implements rejoining without a rebalance",
)
def test_static_restart_causes_no_rebalance_for_the_other_member(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(4)
    restarted, other, owned, rebalances_before = run_restart(bootstrap_servers, topic)
    try:
        assert restarted.assignment == owned
        assert other.rebalances == rebalances_before
    finally:
        restarted.close()
        other.close()
