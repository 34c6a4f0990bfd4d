"""A rolling deploy on the suite's broker: each Spark member of a group restarted in turn
(SIGTERM to its process group, started again) while a producer runs and a plain consumer
shares the group. The short version of ``python -m bench rolling`` (issue 25), which measures
the same on a broker with Kafka's default group settings.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from spark_groups.offsets import OffsetRange

from support.broker import broker_kind, unique, wait_until
from support.members import Member, member_spec, stop_all
from support.options import plain_consumer_config
from support.producers import IdProducer
from support.services import PlainService
from support.tables import reading_commits, table_ids, unfinished_batch

PARTITIONS = 4

pytestmark = pytest.mark.skipif(
    broker_kind() != "kafka", reason="a plain consumer in the group (Apache Kafka lane)"
)


def test_a_rolling_restart_of_every_spark_member_loses_and_duplicates_nothing(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, group = make_topic(PARTITIONS), unique("rolling")
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "1 second")
    table = spec["table"]
    # cooperative-sticky and the fast session of sink_member.py's defaults; the
    # barrier ends once the batch is in the table; the source knows the query's checkpoint,
    # so a batch replayed at a restart reads only what is still the member's (docs/groups.md).
    members = [
        Member(
            n,
            {
                **spec,
                "checkpoint": str(tmp_path / f"cp-{n}"),
                "source_options": {
                    "sink.table": table,
                    "checkpointLocation": str(tmp_path / f"cp-{n}"),
                },
            },
            logs,
        )
        for n in "AB"
    ]
    settings = plain_consumer_config(bootstrap_servers, group, "cooperative-sticky")
    service = PlainService(bootstrap_servers, topic, group, settings)
    producer = IdProducer(bootstrap_servers, topic, PARTITIONS, per_second=100)
    replayed: list[OffsetRange] = []  # the batches the SIGTERM cut short, replayed at restart
    producer.start()
    try:
        for m in members:
            m.start()
        service.start()
        wait_until(
            lambda: all(reading_commits(table, m.name) for m in members) and bool(service.reads),
            240,
            "both Spark members and the plain consumer to read",
        )
        for m in members:
            before = reading_commits(table, m.name)
            m.terminate(90)
            assert m.returncode == -signal.SIGTERM
            replayed.extend(unfinished_batch(m.spec["checkpoint"]))
            m.start()
            wait_until(
                lambda m=m, before=before: reading_commits(table, m.name) > before,
                300,  # a Spark start: ~20 s on a quiet machine, minutes on a loaded one
                f"the restarted {m.name} to read again",
            )
            assert all(o.running for o in members)
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        assert len(produced) > 1000

        def handled() -> set[int]:
            return set(table_ids(table)) | {r[0] for r in service.reads}

        wait_until(lambda: handled() >= produced, 120, "every produced id to be handled")
        stop_all(members, stop_file)
        service.stop()
    finally:
        producer.stop_event.set()
        service.stop_event.set()
        for m in members:
            m.kill()
            m.reap()

    in_table = table_ids(table)
    twice = sorted(i for i, n in Counter(in_table).items() if n > 1)
    assert not twice, f"written twice into the table: {twice[:20]}"
    by_service = {r[0]: (r[1], r[2]) for r in service.reads}
    assert len(by_service) == len(service.reads), "the plain consumer processed an id twice"
    handled = set(in_table) | set(by_service)
    assert handled == produced, f"lost: {sorted(produced - handled)[:20]}"
    # A batch the SIGTERM cut short is replayed at the restart only for the partitions still
    # the member's: nothing the plain consumer processed meanwhile lands in the table too.
    both = sorted(set(in_table) & set(by_service))
    assert not both, (
        f"in the table and processed by the consumer: {both[:20]} (batches cut short and "
        f"replayed: {replayed})"
    )
    for m in members:
        first_run = (logs / f"{m.name}-1.log").read_text(errors="replace")
        # The reader process began leaving on SIGTERM (whether LeaveGroup went out before
        # Spark's shutdown ended that process depends on the machine's load: not asserted).
        assert "SIGTERM: leaving consumer group" in first_run, m.name
