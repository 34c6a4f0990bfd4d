"""A member with nothing to read, and a member whose first assignment is late (issue 25).

On the suite's broker, without Spark: the calls Spark makes (``latest_offset``) are made
directly, as in test_stream.py.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer
from test_stream import make_stream

from spark_groups import metrics as coordinator_metrics
from spark_groups.errors import GroupMembershipError
from spark_groups.group import first_assignment
from spark_groups.offsets import BatchOffset, TopicPartition

from support.broker import broker_kind, produce_ids, wait_until


def metrics_of(stream) -> dict:
    report = stream.report_latest()
    assert report is not None
    return report[coordinator_metrics.METRICS_KEY]


def test_a_member_with_no_partitions_is_idle_healthy_and_takes_over_when_another_leaves(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, caplog
) -> None:
    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10), 1)
    first, second = (make_stream(streams, bootstrap_servers, topic, group, None) for _ in range(2))
    start = BatchOffset.initial().to_json()
    planned = first.latest_offset(start, None)
    assert BatchOffset.from_json(planned).ends() == {TopicPartition(topic, 0): 10}
    caplog.set_level(logging.INFO, logger="spark_groups")
    # The second member joins a group with one partition: it gets none, and that is fine.
    assert second.latest_offset(start, None) is start
    wait_until(lambda: second.ensure_started().generation >= 0, what="the second member to join")
    m = metrics_of(second)
    assert m["idle"] is True and m["assigned_partitions"] == 0
    assert any("owns no partitions" in r.getMessage() for r in caplog.records)
    for _ in range(3):  # planning again and again: no error, nothing planned
        assert second.latest_offset(start, None) is start
    assert metrics_of(first)["idle"] is False
    # The first member commits batch 0 and leaves; the idle one takes the partition over
    # where batch 0 ended.
    first.latest_offset(planned, None)
    first.stop()
    produce_ids(bootstrap_servers, topic, range(10, 15), 1)

    def plans() -> bool:
        nxt = second.latest_offset(start, None)
        return nxt is not start and BatchOffset.from_json(nxt).ranges[0].from_offset == 10

    wait_until(plans, what="the idle member to take the partition over")
    assert metrics_of(second)["idle"] is False


#: An eager assignor on both sides: a rebalance needs every member to give up its partitions
#: and rejoin, which a member that does not poll does not do.
EAGER = {"partition.assignment.strategy": "range"}


def stuck_member(servers: str, topic: str, group: str) -> Consumer:
    """A plain consumer that joins, then stops polling (an application stuck in its own
    processing): an eager rebalance waits for it to rejoin, up to its max.poll.interval.ms."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "500",
            "max.poll.interval.ms": "60000",
            "enable.auto.commit": "false",
            **EAGER,
        }
    )
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned.set())
    wait_until(lambda: consumer.poll(0.2) is not None or assigned.is_set(),
               what="the plain consumer to join")  # fmt: skip
    return consumer


def test_a_bound_on_the_first_assignment_fails_naming_the_option_and_the_groups_state(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    consumer = stuck_member(bootstrap_servers, topic, group)
    try:
        stream = make_stream(
            streams, bootstrap_servers, topic, group, None, joinTimeoutMs="4000", **EAGER
        )
        with pytest.raises(GroupMembershipError) as failure:
            stream.latest_offset(BatchOffset.initial().to_json(), None)
        message = str(failure.value)
        assert "joinTimeoutMs=4000" in message and failure.value.group == group
        assert "PREPARING_REBALANC" in message, message  # the group waits for a member
        assert "rdkafka@" in message or "members:" in message, message
    finally:
        consumer.close()


def test_without_a_bound_a_member_waits_says_why_and_goes_on_once_assigned(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(first_assignment, "FIRST_REPORT_S", 1.0)
    monkeypatch.setattr(first_assignment, "REPORT_EVERY_S", 1.0)
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(20), 2)
    consumer = stuck_member(bootstrap_servers, topic, group)
    caplog.set_level(logging.INFO, logger="spark_groups")
    stream = make_stream(streams, bootstrap_servers, topic, group, None, **EAGER)
    result: list = []
    waiting = threading.Thread(
        target=lambda: result.append(stream.latest_offset(BatchOffset.initial().to_json(), None))
    )
    waiting.start()
    try:
        reports = lambda: [  # noqa: E731
            r.getMessage() for r in caplog.records if "still waiting" in r.getMessage()
        ]
        wait_until(lambda: len(reports()) >= 2, 60, what="two reports of the wait")
        assert "no bound: joinTimeoutMs is not set" in reports()[0]
        assert "PREPARING_REBALANC" in reports()[0], reports()[0]
        assert not result  # still waiting, no error
    finally:
        consumer.close()  # the stuck member leaves: the rebalance completes without it
    waiting.join(60)
    assert result, "latest_offset never returned"
    planned = BatchOffset.from_json(result[0])
    assert sum(r.size for r in planned.ranges) == 20


def test_the_group_description_names_the_state_and_warns_about_tansu(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    consumer = stuck_member(bootstrap_servers, topic, group)
    try:
        text = first_assignment.describe_group({"bootstrap.servers": bootstrap_servers}, group)
    finally:
        consumer.close()
    assert text.startswith("state "), text
    on_tansu = broker_kind() == "tansu"
    assert ("the broker is Tansu" in text) == on_tansu, text
    if not on_tansu:  # Tansu's DescribeGroups lists no members
        assert "STABLE, 1 members: rdkafka@" in text, text
