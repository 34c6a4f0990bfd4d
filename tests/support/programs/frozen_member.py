"""A driver-side member in its own process, for the fencing tests (no Spark).

    python frozen_member.py SERVERS TOPIC GROUP LEDGER PROTOCOL MODE GO_FILE

``PROTOCOL`` is ``classic`` or ``consumer`` (KIP-848). The test freezes this process with
SIGSTOP past its session, lets another member take the partition, creates ``GO_FILE`` and
thaws it: the process acts the moment it runs again.

``MODE=stream``: plans batch 0 with a :class:`GroupStream`, prints ``PLANNED``, waits for
``GO_FILE``, then runs the safe point for batch 0 at once (which would commit it) and prints
``RESULT`` with its metrics.

``MODE=raw``: owns the partition through a :class:`GroupMember`, prints ``OWNED``, and runs
one request on the member's owner thread that waits for ``GO_FILE`` and then commits offset
20 straight away, before librdkafka can serve the fencing event, so the commit reaches the
coordinator under the old generation / member epoch. Prints ``RESULT`` with the error.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from spark_groups.errors import CommitError
from spark_groups.group.member import GroupMember
from spark_groups.group.stream import GroupStream
from spark_groups.offsets import BatchOffset, TopicPartition
from spark_groups.options import parse_options


def wait_for(go: Path) -> None:
    """Return once ``go`` exists. The test creates it while this process is frozen, so the
    process acts as soon as it is thawed (within one 10 ms poll)."""
    while not go.exists():
        time.sleep(0.01)


def group_settings(protocol: str) -> dict[str, str]:
    """Settings that make the session end a few seconds after the freeze."""
    if protocol == "consumer":  # session timeout and heartbeats are the broker's
        return {"group.protocol": "consumer"}
    return {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}


def run_stream(servers: str, topic: str, group: str, ledger: str, protocol: str, go: Path) -> None:
    options = parse_options(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "group.id": group,
            "offsets.table": ledger,
            "startingOffsets": "earliest",
            **{f"kafka.{k}": v for k, v in group_settings(protocol).items()},
        }
    )
    stream = GroupStream(options)
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    print("PLANNED", json.dumps(planned), flush=True)
    wait_for(go)
    stream.latest_offset(planned, None)  # the safe point for batch 0: would commit it
    member = stream.ensure_started()
    print(
        "RESULT",
        json.dumps(
            {
                "member_id": member.member_id,
                "failed_commits": stream.metrics.failed_commits,
                "lost_partitions": stream.metrics.lost_partitions,
                "owned": len(member.assignment),
            }
        ),
        flush=True,
    )
    stream.stop()


def run_raw(servers: str, topic: str, group: str, protocol: str, go: Path) -> None:
    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": servers, "group.id": group, **group_settings(protocol)}
    if protocol == "classic":
        config["partition.assignment.strategy"] = "cooperative-sticky"
    member = GroupMember(config, [topic]).start()
    deadline = time.monotonic() + 60
    while tp not in member.assignment:
        assert time.monotonic() < deadline, "never got the partition"
        time.sleep(0.05)
    print("OWNED", flush=True)

    def commit_after_go(consumer: Any) -> str:
        wait_for(go)  # the owner thread waits here, so no poll serves the fence
        import confluent_kafka

        try:
            consumer.commit(
                offsets=[confluent_kafka.TopicPartition(topic, 0, 20)], asynchronous=False
            )
        except confluent_kafka.KafkaException as exc:
            return str(exc.args[0].name())
        return "committed"

    try:
        outcome = member.call(commit_after_go, timeout_s=120)
    except CommitError as exc:  # pragma: no cover - the call returns the error name
        outcome = type(exc).__name__
    print("RESULT", json.dumps({"outcome": outcome}), flush=True)
    member.close()


def main() -> None:
    servers, topic, group, ledger, protocol, mode, go = sys.argv[1:8]
    if mode == "raw":
        run_raw(servers, topic, group, protocol, Path(go))
    else:
        run_stream(servers, topic, group, ledger, protocol, Path(go))


if __name__ == "__main__":
    main()
