"""Two Spark queries in one group: handover while records flow (issue: the barrier)."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest

from spark_groups.group.history import history_path, read_history
from spark_groups.ledger import OffsetLedger

from support.broker import broker_kind, unique, wait_until
from support.options import ASSIGNMENTS, assignment_options, group_options
from support.producers import FlowingProducer
from support.spark import source

log = logging.getLogger(__name__)


def start_query(spark, opts: dict, table: str, checkpoint: Path):
    df = source(spark, opts, checkpoint)
    return (
        df.selectExpr("cast(value as string) as id", "partition")
        .writeStream.format("memory")
        .queryName(table)
        .trigger(processingTime="500 milliseconds")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


@pytest.mark.parametrize("strategy", ASSIGNMENTS)
def test_second_member_joins_while_records_flow(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path, strategy: str
) -> None:
    if strategy == "consumer" and broker_kind() == "tansu":
        pytest.skip("Tansu has no KIP-848 (group.protocol=consumer)")
    topic, group, total = make_topic(4), unique("g"), 720  # 12 s of records at 60/s
    ledger = str(tmp_path / "ledger")
    opts = group_options(
        bootstrap_servers, topic, group, ledger,
        maxOffsetsPerTrigger="40", **assignment_options(strategy),
    )  # fmt: skip
    producer = FlowingProducer(bootstrap_servers, topic, 4, total, per_s=60)
    first_table, second_table = unique("a"), unique("b")
    first = start_query(spark, opts, first_table, tmp_path / "cp-a")
    queries = [first]
    try:
        producer.start()
        wait_until(lambda: spark.table(first_table).count() > 0, 90, "the first member's rows")
        second = start_query(spark, opts, second_table, tmp_path / "cp-b")
        queries.append(second)
        wait_until(lambda: spark.table(second_table).count() > 0, 90, "the second member's rows")

        def ids(table: str) -> list[int]:
            return [int(r.id) for r in spark.table(table).select("id").collect()]

        wait_until(
            lambda: (
                producer.done.is_set() and len(ids(first_table)) + len(ids(second_table)) >= total
            ),
            180,
            "every record to be read",
        )
        got = ids(first_table) + ids(second_table)
        assert sorted(got) == list(range(total)), "lost or duplicated records"
    finally:
        for q in queries:
            q.stop()

    # The next owner starts exactly where the previous one stopped, partition by partition.
    rows = OffsetLedger(ledger, group).history().to_pylist()
    by_partition: dict[int, list[dict]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r)
    handovers = 0
    for partition, ranges in by_partition.items():
        ranges.sort(key=lambda r: (r["from_offset"], r["committed_at"]))
        for before, after in itertools.pairwise(ranges):
            assert after["from_offset"] == before["until_offset"], (partition, before, after)
            handovers += before["member_id"] != after["member_id"]
    assert handovers >= 1, "no partition moved between the members"

    # The rebalance history has the revocations and how long the barrier held.
    history = read_history(history_path(ledger)).to_pylist()
    revoked = [h for h in history if h["event"] == "revoked"]
    assert revoked, "no revocation recorded"
    waits = sorted({round(h["barrier_wait_ms"]) for h in revoked})
    log.info("%s: barrier waits of the revoking member (ms): %s", strategy, waits)
    first_revoker = revoked[0]["member_id"]
    revoked_at = revoked[0]["at"]
    newcomer_assigned = [
        h["at"] for h in history if h["event"] == "assigned" and h["member_id"] != first_revoker
    ]
    assert newcomer_assigned and min(newcomer_assigned) >= revoked_at

    if strategy != "range":
        # Incremental (cooperative-sticky, and every KIP-848 rebalance): only the partitions
        # that move are revoked; those that stay are never interrupted. The first member
        # commits them before the rebalance and after it, with no revocation or new
        # assignment of them in between.
        moved = {h["partition"] for h in revoked if h["member_id"] == first_revoker}
        assert 0 < len(moved) < 4, f"incremental rebalance revoked {sorted(moved)}"
        staying = set(range(4)) - moved
        events_of_staying = [
            h
            for h in history
            if h["member_id"] == first_revoker
            and h["partition"] in staying
            and h["event"] in ("revoked", "lost")
        ]
        assert not events_of_staying, events_of_staying
        mine = [r for r in rows if r["member_id"] == first_revoker and r["partition"] in staying]
        assert any(r["committed_at"] < revoked_at for r in mine)
        assert any(r["committed_at"] > min(newcomer_assigned) for r in mine), (
            "the staying partitions were not processed after the rebalance"
        )
