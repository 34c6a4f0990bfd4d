"""Every crash point once end to end, with Spark: member processes as users run them.

Two Spark members (``support/programs/sink_member.py``: a kafka-group -> delta-group query
each, their own checkpoints, one table) and a plain confluent-kafka service with
:class:`spark_groups.handover.SinkTableHandover` share one group while a producer writes.
In each round both Spark members start with a crash point of their own armed once they read
(``spark_groups.crash_points``): one stops with SIGKILL, the other with SIGTERM, exactly
there, in whichever of the member's processes reaches it first (the reader process, the
sink's commit, an executor). The service and the members of the next round take their
partitions over. Five rounds cover the ten points; then the service handles what is
left. Nothing may be lost, nothing twice in the table, nothing in both the table
and the service's output. The members split their partitions' ranges between tasks (A with
``minPartitions``, B with ``maxRecordsPerPartition``: several tasks and sink files per
partition and batch), so the crash points reached in an executor stop a member in the middle
of a batch whose other pieces were read or are still being read. The matrix of every point,
signal and kind of next owner runs without Spark in ``test_crash_matrix.py``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from crash_support import join_and_leave

from spark_groups.crash_points import ARM_ENV, CRASH_ENV, POINTS
from spark_groups.handover import SinkTableHandover

from support.broker import broker_kind, unique, wait_until
from support.members import Member, member_spec
from support.producers import IdProducer
from support.services import PlainService
from support.tables import reading_commits, table_ids

PARTITIONS = 4
GROUP = {
    "kafka.session.timeout.ms": "6000",
    "kafka.heartbeat.interval.ms": "500",
    "partition.assignment.strategy": "range",  # eager: every rebalance revokes, so
}  # a member joining reaches the other's revocation point
#: How A and B split a batch's ranges (~10 records per partition): 8 and 12 tasks a batch.
SPLITS = ({"minPartitions": "6"}, {"maxRecordsPerPartition": "4"})


pytestmark = pytest.mark.skipif(
    broker_kind() != "kafka", reason="a plain consumer in the group (Apache Kafka lane)"
)


def test_each_crash_point_with_spark_members_loses_and_duplicates_nothing(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, group = make_topic(PARTITIONS), unique("crash-spark")
    spec, logs, _ = member_spec(bootstrap_servers, topic, group, tmp_path, "0 seconds")
    table = spec["table"]
    members = [
        Member(
            name,
            {
                **spec,
                "checkpoint": str(tmp_path / f"cp-{name}"),
                "stop_file": str(tmp_path / f"stop-{name}"),
                "source_options": {
                    **GROUP,
                    **split,
                    "sink.table": table,
                    "maxOffsetsPerTrigger": "40",
                },
            },
            logs,
        )
        for name, split in zip("AB", SPLITS, strict=True)
    ]
    helper = SinkTableHandover(table, group)
    settings = {
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "500",
        "partition.assignment.strategy": "range",
    }
    service = PlainService(bootstrap_servers, topic, group, settings, helper)
    producer = IdProducer(bootstrap_servers, topic, PARTITIONS, per_second=100)
    fired: list[str] = []
    producer.start()
    service.start()
    try:
        for round_, points in enumerate(zip(POINTS[0::2], POINTS[1::2], strict=True)):
            arms = []
            for member, point, sig in zip(members, points, ("SIGKILL", "SIGTERM"), strict=True):
                arm = tmp_path / f"arm-{member.name}-{round_}"
                arms.append(arm)
                Path(member.spec["stop_file"]).unlink(missing_ok=True)
                member.start({CRASH_ENV: f"{point}:{sig}", ARM_ENV: str(arm)})
            for member in members:
                before = reading_commits(table, member.name)
                wait_until(
                    lambda m=member, b=before: reading_commits(table, m.name) > b,
                    300,
                    f"{member.name} to read (round {round_})",
                )
            for member, point, arm in zip(members, points, arms, strict=True):
                arm.touch()
                if point == "revocation":  # a consumer joins and leaves: a rebalance
                    join_and_leave(bootstrap_servers, topic, group, settings)
                if point == "leave":
                    Path(member.spec["stop_file"]).touch()
            for member, point, arm in zip(members, points, arms, strict=True):
                done = arm.with_name(arm.name + ".fired")
                # The crash point renames the arm file, then writes its name into it.
                wait_until(
                    lambda d=done: d.exists() and bool(d.read_text().split()),
                    300,
                    f"{member.name}'s crash point {point}\n{member.log_text()[-3000:]}",
                )
                fired.append(done.read_text().split()[0])
                member.wait(120)
                member.reap()
        assert fired == list(POINTS)
        # The service, the group's last member, takes every partition over where the table
        # ends and handles the rest. (Every round restarted both members from their
        # checkpoints after a crash point: their replays are proven by then.)
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)

        def handled() -> set[int]:
            return set(table_ids(table)) | set(service.ids)

        wait_until(lambda: handled() >= produced, 300, "every produced id to be handled")
    finally:
        producer.stop_event.set()
        service.stop_event.set()
        for member in members:
            member.kill()
            member.reap()
    service.join(30)
    assert service.error is None, service.error
    in_table = Counter(table_ids(table))
    assert not [i for i, n in in_table.items() if n > 1], "written twice into the table"
    served = Counter(service.ids)
    assert not [i for i, n in served.items() if n > 1], "the service processed an id twice"
    assert produced <= set(in_table) | set(served), "lost"
    both = sorted(set(in_table) & set(served))
    assert not both, f"in the table and processed by the service: {both[:20]}"
