"""Kafka's own tools see a group of Spark members and a service written with another client.

Two `kafka-group` queries and a kafka-python consumer share one group (range assignment, as
every member must agree on the assignor). Kafka's `kafka-consumer-groups --describe`, run
from the broker's own jars, shows all three members, which partitions each owns, the offsets
committed, and lag that falls to zero once everything is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_groups.tools.kafka_broker import run_kafka_tool

from kafka_python_service import KafkaPythonService
from support.broker import broker_kind, committed_offsets, produce_ids, unique, wait_until
from support.options import group_options

GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PARTITIONS, TOTAL = 6, 600

pytestmark = pytest.mark.skipif(
    broker_kind() != "kafka", reason="runs Kafka's own tools from the suite's Kafka broker"
)


def describe(broker_servers: str, group: str, *flags: str) -> list[dict[str, str]]:
    """Rows of `kafka-consumer-groups --describe --group GROUP [flags]`, as dicts."""
    out = run_kafka_tool(
        GROUP_COMMAND,
        ["--bootstrap-server", broker_servers, "--describe", "--group", group, *flags],
    )
    rows: list[dict[str, str]] = []
    header: list[str] = []
    for line in out.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = cells
        elif header and len(cells) == len(header):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def test_kafka_consumer_groups_describes_spark_members_beside_a_service(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, group = make_topic(PARTITIONS), unique("g")
    counts = produce_ids(bootstrap_servers, topic, range(TOTAL), PARTITIONS)
    opts = group_options(
        bootstrap_servers, topic, group, str(tmp_path / "ledger"),
        maxOffsetsPerTrigger="30", **{"partition.assignment.strategy": "range"},
    )  # fmt: skip
    tables = [unique("a"), unique("b")]
    queries = []
    service = KafkaPythonService(bootstrap_servers, topic, group)
    try:
        for name in tables:
            queries.append(
                spark.readStream.format("kafka-group").options(**opts).load()
                .selectExpr("cast(value as string) as id")
                .writeStream.format("memory").queryName(name)
                .option("checkpointLocation", str(tmp_path / name))
                .trigger(processingTime="1 second")
                .start()
            )  # fmt: skip
        service.start()

        def members() -> list[dict[str, str]]:
            return describe(bootstrap_servers, group, "--members")

        wait_until(lambda: len(members()) == 3, 120, "three members in the group")
        wait_until(
            lambda: committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == counts,
            180,
            "lag to reach 0",
        )
        rows = members()
        assert len(rows) == 3
        assert sorted(r["CLIENT-ID"] for r in rows).count("orders-service") == 1
        assert sum(int(r["#PARTITIONS"]) for r in rows) == PARTITIONS
        assert all(int(r["#PARTITIONS"]) == 2 for r in rows), rows  # range: 6 over 3

        offsets = describe(bootstrap_servers, group)
        assert sorted(int(r["PARTITION"]) for r in offsets) == list(range(PARTITIONS))
        for r in offsets:
            p = int(r["PARTITION"])
            assert int(r["CURRENT-OFFSET"]) == counts[p] == int(r["LOG-END-OFFSET"]), r
            assert r["LAG"] == "0", r
            assert r["CONSUMER-ID"] != "-", f"partition {p} shows no owner: {r}"
        assert len({r["CONSUMER-ID"] for r in offsets}) == 3

        spark_ids = [int(r.id) for t in tables for r in spark.table(t).collect()]
        assert sorted(spark_ids + service.seen) == list(range(TOTAL))
    finally:
        for q in queries:
            q.stop()
        service.stop_event.set()
        service.join(30)
    assert service.error is None
