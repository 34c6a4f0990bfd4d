"""One group member in its own process, driven by the scenario through stdout lines.

``python -m bench.repro.tansu_leader.member KIND SERVERS TOPIC GROUP SESSION_MS ASSIGNOR``
with KIND ``group`` (spark_groups' GroupMember, librdkafka) or ``kafka-python``. It prints
``STARTED``, then ``ASSIGNED <seconds> <generation> [<partitions>] <member id>`` once it has
its first assignment, and ``CLOSED`` after SIGTERM made it leave the group (LeaveGroup).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable


def say(line: str) -> None:
    """One protocol line on stdout (the scenario reads them)."""
    print(line, flush=True)


def run_group_member(
    servers: str, topic: str, group: str, session_ms: int, assignor: str, stop: threading.Event
) -> None:
    """A spark_groups GroupMember, the member every Spark query of the group runs."""
    from spark_groups.group.member import GroupMember
    from spark_groups.options import parse_options

    options = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "group.id": group,
        "partition.assignment.strategy": assignor,
        "kafka.session.timeout.ms": str(session_ms),
    }
    config = parse_options(options).member_config()
    config["debug"] = "cgrp"  # JoinGroup/SyncGroup answers (the leader's id) in stderr
    started = time.monotonic()
    member = GroupMember(config, [topic]).start()
    say("STARTED")
    while not stop.is_set():
        if member.wait_for_assignment(0.2):
            parts = ",".join(sorted(f"{p.topic}-{p.partition}" for p in member.assignment))
            seconds = time.monotonic() - started
            say(f"ASSIGNED {seconds:.1f} {member.generation} [{parts}] {member.member_id}")
            break
    stop.wait()
    member.close()
    say("CLOSED")


def run_kafka_python(
    servers: str, topic: str, group: str, session_ms: int, assignor: str, stop: threading.Event
) -> None:
    """A plain kafka-python consumer (a service beside the Spark members)."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=servers,
        group_id=group,
        enable_auto_commit=False,
        partition_assignment_strategy=[assignors[assignor]],
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(500, session_ms // 3),
    )
    started = time.monotonic()
    say("STARTED")
    assigned = False
    while not stop.is_set():
        consumer.poll(timeout_ms=200)
        if not assigned and consumer.assignment():
            assigned = True
            parts = ",".join(sorted(f"{p.topic}-{p.partition}" for p in consumer.assignment()))
            member_id = consumer._coordinator._generation.member_id  # for the report only
            say(f"ASSIGNED {time.monotonic() - started:.1f} ? [{parts}] {member_id}")
    consumer.close()
    say("CLOSED")


KINDS: dict[str, Callable[[str, str, str, int, str, threading.Event], None]] = {
    "group": run_group_member,
    "kafka-python": run_kafka_python,
}


def main(argv: list[str]) -> None:
    """Run one member until SIGTERM."""
    kind, servers, topic, group, session_ms, assignor = argv
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s.%(msecs)03d %(name)s %(message)s",
        datefmt="%H:%M:%S",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    KINDS[kind](servers, topic, group, int(session_ms), assignor, stop)


if __name__ == "__main__":
    main(sys.argv[1:])
