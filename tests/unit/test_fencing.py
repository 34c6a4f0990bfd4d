"""A member whose session expired (frozen with SIGSTOP) commits nothing stale, on both group
protocols.

Two defences stand between a fenced member and a stale commit, and each test shows one:

- Kafka's own: a commit under the old generation is refused by the group coordinator
  (ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID). Shown with the classic protocol, where the
  member cannot rejoin before the commit leaves (a new generation needs a whole rebalance).
  With KIP-848 the client can be a member again within one heartbeat of thawing, so whether
  the coordinator sees the commit under the old member epoch (and refuses it with
  UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH) or under the new one (and accepts it) is a race:
  both were seen on Kafka 4.3.
- spark_groups': the safe point commits only partitions the member still owns, checked on
  the member's thread together with the commit. Kafka checks the generation, not ownership:
  a member that has already rejoined (a new generation or epoch) may commit any partition,
  so without this check a batch planned before the fence could still overwrite the new
  owner's offsets.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer

from spark_groups.group.member import GroupMember
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import TopicPartition

from support.broker import broker_kind
from support.launch import MemberProcess
from support.members import FROZEN_MEMBER

PROTOCOLS = ["classic", "consumer"]
#: What Kafka answers a commit from a member it has fenced.
FENCED_BY_KAFKA = {"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"}


def member_config(servers: str, group: str, protocol: str) -> dict[str, str]:
    config = {"bootstrap.servers": servers, "group.id": group}
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {
                "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "500",
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
    return config


@contextmanager
def frozen_process(
    servers: str, topic: str, group: str, ledger: str, protocol: str, mode: str, tmp_path: Path
) -> Iterator[MemberProcess]:
    go = tmp_path / "go"
    args = [servers, topic, group, ledger, protocol, mode, str(go)]
    process = MemberProcess("frozen", FROZEN_MEMBER, tmp_path / "logs", args)
    process.start()
    try:
        yield process
    finally:
        process.signal(signal.SIGCONT)
        process.kill(10)
        process.reap()


def take_over(servers: str, group: str, topic: str, protocol: str) -> GroupMember:
    """Start the member that gets the partition once the frozen one's session expired."""
    tp = TopicPartition(topic, 0)
    survivor = GroupMember(member_config(servers, group, protocol), [topic]).start()
    deadline = time.monotonic() + 60
    while tp not in survivor.assignment:
        assert time.monotonic() < deadline, "the survivor never got the partition"
        time.sleep(0.1)
    survivor.commit({tp: 7})  # the new owner's progress
    return survivor


def thaw_with_go(process: MemberProcess) -> dict:
    """Create the go file while the process is still frozen, so it acts the moment it runs."""
    Path(process.args[-1]).touch()
    process.signal(signal.SIGCONT)
    line = process.line("RESULT", 180)
    assert process.wait(60) == 0
    return json.loads(line.split(" ", 1)[1])


@pytest.fixture
def one_partition_topic(bootstrap_servers: str, make_topic: Callable[..., str]) -> str:
    topic = make_topic(1)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(20):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(10) == 0
    return topic


def test_kafka_refuses_the_commit_of_a_fenced_member(
    bootstrap_servers: str, one_partition_topic: str, tmp_path: Path
) -> None:
    protocol = "classic"
    if broker_kind() == "tansu":
        pytest.skip("Tansu accepts commits from expired members (docs/brokers.md)")
    topic, group = one_partition_topic, f"g-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    with frozen_process(bootstrap_servers, topic, group, "", protocol, "raw", tmp_path) as frozen:
        frozen.line("OWNED", 120)
        frozen.signal(signal.SIGSTOP)  # no heartbeats from here on
        survivor = take_over(bootstrap_servers, group, topic, protocol)
        try:
            result = thaw_with_go(frozen)
            assert result["outcome"] in FENCED_BY_KAFKA, result
            assert survivor.committed([tp]) == {tp: 7}
        finally:
            survivor.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_fenced_member_commits_nothing_stale(
    bootstrap_servers: str, one_partition_topic: str, tmp_path: Path, protocol: str
) -> None:
    if protocol == "consumer" and broker_kind() == "tansu":
        pytest.skip("Tansu has no KIP-848 (group.protocol=consumer)")
    topic, group = one_partition_topic, f"g-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    ledger = str(tmp_path / "ledger")
    with frozen_process(
        bootstrap_servers, topic, group, ledger, protocol, "stream", tmp_path
    ) as frozen:
        line = frozen.line("PLANNED", 120)
        assert json.loads(line.split(" ", 1)[1])["ranges"] == {topic: {"0": [0, 20]}}
        frozen.signal(signal.SIGSTOP)
        survivor = take_over(bootstrap_servers, group, topic, protocol)
        try:
            result = thaw_with_go(frozen)
            # The stale batch [0, 20) moved nothing: the new owner's 7 stands, and the ledger
            # has no row from the fenced member. Either defence may have acted first.
            assert survivor.committed([tp]) == {tp: 7}
            rows = OffsetLedger(ledger, group).history().to_pylist()
            assert all(r["member_id"] != result["member_id"] for r in rows)
            assert result["lost_partitions"] + result["failed_commits"] >= 1
        finally:
            survivor.close()
