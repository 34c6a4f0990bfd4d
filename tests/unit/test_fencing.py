"""A member whose session expired (frozen with SIGSTOP) never commits stale offsets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from spark_groups.group.member import GroupMember
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import TopicPartition


def test_a_fenced_member_commits_nothing_stale(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(20):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(10) == 0
    ledger = str(tmp_path / "ledger")
    frozen = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("frozen_member.py")),
         bootstrap_servers, topic, group, ledger],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    survivor = None
    try:
        assert frozen.stdout is not None and frozen.stdin is not None
        line = frozen.stdout.readline()
        assert line.startswith("PLANNED"), line
        assert json.loads(line.split(" ", 1)[1])["ranges"] == {topic: {"0": [0, 20]}}
        os.kill(frozen.pid, signal.SIGSTOP)  # no heartbeats from here on
        survivor = GroupMember(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": group,
                "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "500",
                "partition.assignment.strategy": "cooperative-sticky",
            },
            [topic],
        ).start()
        deadline = time.monotonic() + 60
        while tp not in survivor.assignment:  # after the frozen member's session expired
            assert time.monotonic() < deadline, "the survivor never got the partition"
            time.sleep(0.1)
        survivor.commit({tp: 7})  # the new owner's progress
        os.kill(frozen.pid, signal.SIGCONT)
        frozen.stdin.write("go\n")
        frozen.stdin.flush()
        result_line = frozen.stdout.readline()
        assert result_line.startswith("RESULT"), result_line
        result = json.loads(result_line.split(" ", 1)[1])
        assert frozen.wait(60) == 0
        # The stale batch [0, 20) moved nothing: the new owner's 7 stands, and the ledger
        # has no row from the fenced member.
        assert survivor.committed([tp]) == {tp: 7}
        rows = OffsetLedger(ledger, group).history().to_pylist()
        assert all(r["member_id"] != result["member_id"] for r in rows)
        assert result["lost_partitions"] + result["failed_commits"] >= 1
    finally:
        if frozen.poll() is None:
            os.kill(frozen.pid, signal.SIGCONT)
            frozen.kill()
            frozen.wait(10)
        if survivor is not None:
            survivor.close()
