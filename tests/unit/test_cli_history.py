"""spark-groups history: the ledger and the rebalance history merged, against real tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner
from deltalake import write_deltalake

from spark_groups.group.history import HISTORY_SCHEMA, history_path
from spark_groups.ledger import CATCH_UP_BATCH, RESET_BATCH, LedgerRow, OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.tools.cli import EXIT_BAD_OPTION, main
from spark_groups.tools.timeline import timeline

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rebalance(event: str, partition: int, member: str, seconds: float, **kw) -> dict:
    return {
        "group_id": kw.get("group", "g"), "event": event, "topic": "orders",
        "partition": partition, "generation": kw.get("generation", 1), "member_id": member,
        "at": at(seconds), "barrier_wait_ms": kw.get("wait"), "waited_for_batch": kw.get("batch"),
    }  # fmt: skip


def make_tables(tmp_path: Path) -> str:
    """Member a reads both partitions; b joins, a's revocation waits for batch 1; b goes on."""
    ledger_path = str(tmp_path / "ledger")
    ledger = OffsetLedger(ledger_path, "g")
    ledger.append(
        [
            LedgerRow("orders", 0, 0, 10, "a", 1, 0, at(10)),
            LedgerRow("orders", 1, 0, 7, "a", 1, 0, at(10)),
        ]
    )
    ledger.append([LedgerRow("orders", 1, 7, 12, "a", 1, 1, at(21))])
    ledger.append([LedgerRow("orders", 1, 12, 15, "b", 2, CATCH_UP_BATCH, at(25))])
    ledger.append([LedgerRow("orders", 1, 15, 20, "b", 2, 0, at(30))])
    ledger.append([LedgerRow("orders", 0, 10, 4, "reset:ops@host", -1, RESET_BATCH, at(40))])
    rows = [
        rebalance("assigned", 0, "a", 1),
        rebalance("assigned", 1, "a", 1),
        rebalance("revoked", 1, "a", 20, wait=1500.0, batch=1),
        rebalance("assigned", 1, "b", 22, generation=2),
        rebalance("lost", 1, "x", 23, group="another-group"),  # not this group's
    ]
    write_deltalake(history_path(ledger_path), pa.Table.from_pylist(rows, HISTORY_SCHEMA))
    return ledger_path


def test_timeline_merges_batches_and_rebalances_in_time_order(tmp_path: Path) -> None:
    events = timeline(make_tables(tmp_path), "g")
    assert [(e.at, e.kind, e.partition.partition, e.member_id) for e in events] == [
        (at(1), "assigned", 0, "a"),
        (at(1), "assigned", 1, "a"),
        (at(10), "batch", 0, "a"),
        (at(10), "batch", 1, "a"),
        (at(20), "revoked", 1, "a"),
        (at(21), "batch", 1, "a"),
        (at(22), "assigned", 1, "b"),
        (at(25), "catch-up", 1, "b"),
        (at(30), "batch", 1, "b"),
        (at(40), "reset", 0, "reset:ops@host"),
    ]
    assert events[4].describe() == "revoked; barrier waited 1500 ms for batch 1"
    assert events[5].describe() == "batch 1: [7, 12) 5 records"
    assert events[7].describe() == "caught up with the sink: [12, 15)"
    assert events[9].describe() == "position reset 10 -> 4"


def test_history_command_filters_by_partition_time_and_limit(tmp_path: Path) -> None:
    ledger_path = make_tables(tmp_path)
    runner = CliRunner()

    def rows(*args: str) -> list[list[str]]:
        result = runner.invoke(main, ["history", "g", "--offsets-table", ledger_path, *args])
        assert result.exit_code == 0, result.output
        lines = [line for line in result.output.splitlines() if "orders-" in line]
        return [[c.strip() for c in line.split("│")[1:-1]] for line in lines]

    everything = rows()
    assert len(everything) == 10
    assert everything[4] == [
        "2026-11-01 12:00:20.000", "orders-1", "revoked", "a", "1",
        "revoked; barrier waited 1500 ms for batch 1",
    ]  # fmt: skip
    assert [r[2] for r in rows("--partition", "orders:0")] == ["assigned", "batch", "reset"]
    window = rows("--since", "2026-11-01T12:00:20", "--until", "2026-11-01T12:00:30+00:00")
    assert [r[2] for r in window] == ["revoked", "batch", "assigned", "catch-up"]
    assert [r[2] for r in rows("--limit", "2")] == ["batch", "reset"]
    explicit = rows("--rebalances-table", str(tmp_path / "nothing-here"), "--partition", "orders:1")
    assert [r[2] for r in explicit] == ["batch", "batch", "catch-up", "batch"]

    bad = runner.invoke(main, ["history", "g", "--offsets-table", ledger_path, "--since", "soon"])
    assert bad.exit_code == EXIT_BAD_OPTION
    assert "--since" in bad.output
    bad = runner.invoke(main, ["history", "g", "--offsets-table", ledger_path, "--partition", "x"])
    assert bad.exit_code == EXIT_BAD_OPTION
    assert "TOPIC:PARTITION" in bad.output
    wrong_group = runner.invoke(main, ["history", "h", "--offsets-table", ledger_path])
    assert wrong_group.exit_code == 1
    assert "belongs to consumer group 'g'" in wrong_group.output


def test_timeline_of_a_missing_ledger_is_empty(tmp_path: Path) -> None:
    assert timeline(str(tmp_path / "none"), "g", partitions=[TopicPartition("t", 0)]) == []
