"""Static membership (group.instance.id): a restarted member gets its partitions back.

Getting the partitions back is shown on librdkafka's mock cluster and on the session's broker;
"no rebalance for the others" needs Apache Kafka (the suite's default broker): the embedded
Tansu broker does not implement static membership (partitions end up assigned to nobody) and
the mock cluster rebalances anyway; see docs/brokers.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from spark_groups.group.member import GroupMember, coordinator_view

from support.broker import broker_kind, wait_until

#: Tansu has no static membership (docs/brokers.md); the suite's default broker has.
needs_static_membership = pytest.mark.skipif(
    broker_kind() == "tansu",
    reason="Tansu has no static membership; the suite's default broker (Apache Kafka) has",
)


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
    wait_until(lambda: len(first.assignment) == 2 and len(other.assignment) == 2, 30)
    owned, rebalances_before = first.assignment, other.rebalances
    first.close()  # a static member does not send LeaveGroup
    restarted = member("job-a")
    wait_until(lambda: len(restarted.assignment) == 2, 30)
    return restarted, other, owned, rebalances_before


def test_restarted_static_member_gets_its_partitions_back(
    mock_servers: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"static-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": mock_servers})
    producer.produce(topic, value=b"x")  # the mock cluster creates topics with 4 partitions
    assert producer.flush(10) == 0
    with caplog.at_level("INFO", logger="spark_groups.group.member"):
        restarted, other, owned, _ = run_restart(mock_servers, topic)
    try:
        assert restarted.assignment == owned
        assert other.assignment.isdisjoint(owned)
        # the mock cluster describes no group: the static member closed without waiting for
        # an answer that never comes
        assert "closing without waiting for group" in caplog.text
    finally:
        restarted.close()
        other.close()


@needs_static_membership
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


@needs_static_membership
def test_a_static_member_closed_mid_handover_takes_what_is_on_its_way_first(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """A static member that joins beside a member owning every partition gets nothing in its
    first assignment (cooperative-sticky revokes first, assigns in the next rebalance). Closed
    right then, it serves that next assignment before closing: closing with an assignment on
    its way can freeze the process (librdkafka issue 4884), and the coordinator keeps the
    static member's place with what it was given."""
    topic = make_topic(3)
    base, member = static_pair(bootstrap_servers, topic)
    other = GroupMember(base, [topic]).start()
    try:
        wait_until(lambda: len(other.assignment) == 3, 30, "the other member to own the topic")
        joining = member("job-a")
        assert joining.wait_for_assignment(30)
        assert joining.assignment == frozenset()  # the handover's first half
        joining.close()
        assert joining.rebalances == 2  # its second half was served before closing
        view = coordinator_view.describe(coordinator_view.admin_for(base), base["group.id"], 10)
        assert view is not None and view.stable
        kept = view.owned[joining.member_id]
        assert len(kept) == 1 and kept.isdisjoint(other.assignment)
    finally:
        other.close()
