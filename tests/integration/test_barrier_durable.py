"""A revocation waits for its batch to be durable, not for Spark's next trigger (issue 14).

The first member's trigger is a year long: after its first batch Spark does not call the
source again within the test (Spark fires processing-time triggers at multiples of the
interval since the epoch, so a 10-minute trigger fires at every 10th minute of the clock).
Without a durability signal its revocation would hold the moving partitions until that
trigger, or until the rebalance timeout, and then let them go uncommitted (read twice).
With the source option ``checkpointLocation`` (any sink) or ``sink.table`` (the
``delta-group`` sink) the barrier sees the batch durable, commits it and hands the
partitions over: the second member reads only what the first did not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from spark_groups.group.history import history_path, read_history
from spark_groups.ledger import OffsetLedger
from spark_groups.sink.spark import read_delta

from support.broker import produce_ids, unique, wait_until
from support.options import group_options

YEAR_S = 365 * 86400


def start(spark: Any, opts: dict, signal: str, name: str, trigger: str, work: Path) -> Any:
    checkpoint = str(work / f"cp-{name}")
    source = dict(opts)
    if signal == "checkpoint":
        source["checkpointLocation"] = checkpoint
    else:
        source["sink.table"] = str(work / "table")
    df = spark.readStream.format("kafka-group").options(**source).load()
    df = df.selectExpr("cast(value as string) as id", "topic", "partition", "offset")
    if signal == "checkpoint":
        writer = df.writeStream.format("memory").queryName(f"{name}_{work.name}")
    else:
        writer = df.writeStream.format("delta-group").option("group.id", opts["group.id"])
    writer = writer.trigger(processingTime=trigger).option("checkpointLocation", checkpoint)
    return writer.start() if signal == "checkpoint" else writer.start(str(work / "table"))


@pytest.mark.parametrize("signal", ["checkpoint", "sink"])
def test_a_revocation_does_not_wait_for_the_next_trigger(
    spark: Any, bootstrap_servers: str, make_topic: Any, tmp_path: Path, signal: str
) -> None:
    if (time.time() % YEAR_S) > YEAR_S - 900:
        pytest.skip("the first member's yearly trigger fires within 15 minutes")
    topic, group = make_topic(4), unique("g")
    work = tmp_path / unique("w")
    work.mkdir()
    ledger = str(work / "ledger")
    opts = group_options(bootstrap_servers, topic, group, ledger)
    produce_ids(bootstrap_servers, topic, range(400), 4)

    def ids(name: str) -> list[int]:
        if signal == "checkpoint":
            return [int(r.id) for r in spark.table(f"{name}_{work.name}").collect()]
        table = work / "table"
        if not (table / "_delta_log").exists():
            return []
        return [int(r.id) for r in read_delta(spark, str(table)).collect()]

    queries = [start(spark, opts, signal, "a", "365 days", work)]
    try:
        wait_until(lambda: len(ids("a")) == 400, 120, "the first member's first batch")
        queries.append(start(spark, opts, signal, "b", "1 second", work))

        def b_assigned() -> set[int]:
            rows = read_history(history_path(ledger)).to_pylist()
            first = rows[0]["member_id"]
            return {
                r["partition"] for r in rows if r["event"] == "assigned" and r["member_id"] != first
            }

        # Well within the rebalance timeout (5 minutes), the barrier's longest wait.
        wait_until(lambda: bool(b_assigned()), 150, "the second member's partitions")
        moved = b_assigned()
        produce_ids(bootstrap_servers, topic, range(400, 800), 4)
        expected = sorted(range(400)) + [i for i in range(400, 800) if i % 4 in moved]
        if signal == "checkpoint":
            wait_until(lambda: len(ids("b")) >= len(expected) - 400, 120, "the new records")
            got = sorted(ids("a") + ids("b"))
        else:
            wait_until(lambda: len(ids("a")) >= len(expected), 120, "the new records")
            got = sorted(ids("a"))  # one table for both members
        # Every record of batch 0 once (the second member resumed after it), and the new
        # records of the moved partitions once.
        assert got == expected
        # The first member's next trigger never came: its batch 0 was committed by the
        # barrier, for the moving partitions only, and the second member went on from there.
        rows = OffsetLedger(ledger, group).history().to_pylist()
        first_member = next(r["member_id"] for r in rows if r["batch"] == 0)
        assert committed_by(rows, first_member) == {p: (0, 100) for p in moved}
        assert all(r["from_offset"] >= 100 for r in rows if r["member_id"] != first_member)
    finally:
        for query in queries:
            query.stop()
    # Stopping the first member commits the rest of its finished batch 0 before it leaves.
    wait_until(
        lambda: (
            committed_by(OffsetLedger(ledger, group).history().to_pylist(), first_member)
            == {p: (0, 100) for p in range(4)}
        ),
        60,
        "the first member to commit its finished batch as it stops",
    )


def committed_by(rows: list[dict], member: str) -> dict[int, tuple[int, int]]:
    """The ledger's ranges committed by ``member``, by partition."""
    return {
        r["partition"]: (r["from_offset"], r["until_offset"])
        for r in rows
        if r["member_id"] == member
    }
