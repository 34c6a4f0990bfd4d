"""Retention of the ledger and the rebalance history: old rows go, positions stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from spark_groups.group.history import RebalanceHistory, read_history
from spark_groups.ledger import OUTSIDE_BATCH, RESET_BATCH, LedgerRow, OffsetLedger
from spark_groups.ledger.retention import expire
from spark_groups.offsets import TopicPartition

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_expire_keeps_exactly_the_rows_positions_depend_on(tmp_path: Path) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    for row in [
        # t-0: a later replay of an old range (until 10) must not become the position
        LedgerRow("t", 0, 0, 10, "m", 1, 0, at(0)),
        LedgerRow("t", 0, 10, 20, "m", 1, 1, at(1)),
        LedgerRow("t", 0, 0, 10, "m", 1, 0, at(2)),
        # t-1: a plain consumer's commit (outside) is ahead of the group's own rows
        LedgerRow("t", 1, 0, 5, "m", 1, 0, at(0)),
        LedgerRow("t", 1, 5, 30, "svc", -1, OUTSIDE_BATCH, at(1)),
        LedgerRow("t", 1, 5, 6, "m", 1, 2, at(2)),
        # t-2: reset backwards; the reset marker must stay
        LedgerRow("t", 2, 0, 50, "m", 1, 0, at(0)),
        LedgerRow("t", 2, 50, 7, "ops", -1, RESET_BATCH, at(1)),
        LedgerRow("t", 2, 7, 9, "m", 2, 3, at(5)),  # newer than the cutoff
    ]:
        ledger.append([row])
    before = (ledger.latest_positions(), ledger.latest_positions(own_only=True))

    assert expire(ledger, at(4)) == 4
    assert (ledger.latest_positions(), ledger.latest_positions(own_only=True)) == before
    assert before[1][TopicPartition("t", 1)] == 6  # the group's own position survives too
    kept = {(r["partition"], r["until_offset"], r["batch"]) for r in ledger.history().to_pylist()}
    assert kept == {(0, 20, 1), (1, 30, OUTSIDE_BATCH), (1, 6, 2), (2, 7, RESET_BATCH), (2, 9, 3)}
    assert expire(ledger, at(4)) == 0  # nothing more can go


def test_an_append_applies_the_retention_at_its_maintenance(tmp_path: Path) -> None:
    ledger = OffsetLedger(
        str(tmp_path / "ledger"), "g", compact_every=4, retention=timedelta(days=1)
    )
    old = datetime.now(UTC) - timedelta(days=3)
    for batch in range(3):
        ledger.append([LedgerRow("t", 0, batch, batch + 1, "m", 1, batch, old)])
    ledger.append([LedgerRow("t", 0, 3, 4, "m", 1, 3, datetime.now(UTC))])  # version 4
    assert ledger.history().column("batch").to_pylist() == [3]
    assert ledger.latest_positions() == {TopicPartition("t", 0): 4}


def test_rebalance_history_forgets_events_older_than_the_retention(tmp_path: Path) -> None:
    path = str(tmp_path / "rebalances")
    history = RebalanceHistory(path, "g")
    history.record("assigned", [TopicPartition("t", 0)], 1, "m")
    history.flush()
    assert read_history(path).num_rows == 1
    assert history.expire(datetime.now(UTC) - timedelta(hours=1)) == 0
    assert history.expire(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert read_history(path).num_rows == 0
