"""spark-groups lag-plot: the data series from a known ledger, and the PNG."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka import Producer

from spark_groups.ledger import RESET_BATCH, LedgerRow, OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.tools.cli import main
from spark_groups.tools.lag_plot import lag_series

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def known_ledger(path: str, group: str, topic: str) -> OffsetLedger:
    """p0: [0,4) [4,8), reset to 2, [2,6); p1: [0,4); and a replayed old range of p0."""
    ledger = OffsetLedger(path, group)
    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    ledger.append(
        [LedgerRow(topic, 0, 0, 4, "a", 1, 0, at(1)), LedgerRow(topic, 1, 0, 4, "a", 1, 0, at(1))]
    )
    ledger.append([LedgerRow(topic, 0, 4, 8, "a", 1, 1, at(2))])
    ledger.append([LedgerRow(topic, 0, 0, 4, "a", 1, 1, at(3))])  # replayed: no move back
    ledger.append([LedgerRow(topic, 0, 8, 2, "reset:ops", -1, RESET_BATCH, at(4))])
    ledger.append([LedgerRow(topic, 0, 2, 6, "b", 2, 0, at(5))])
    return ledger


def test_lag_series_follows_the_ledger_rule(tmp_path: Path) -> None:
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    ledger = known_ledger(str(tmp_path / "ledger"), "g", "t")
    series = lag_series(ledger.history(), {p0: 10, p1: 4})
    assert series[p0].times == [T0 + timedelta(seconds=s) for s in (1, 2, 3, 4, 5)]
    assert series[p0].positions == [4, 8, 8, 2, 6]
    assert series[p0].behind == [6, 2, 2, 8, 4]
    assert series[p1].positions == [4]
    assert series[p1].behind == [0]
    # The last point is where the group stands.
    assert {tp: s.positions[-1] for tp, s in series.items()} == ledger.latest_positions()
    # Partitions without a known log end are left out.
    assert list(lag_series(ledger.history(), {p1: 4})) == [p1]


def test_lag_plot_writes_a_png(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(14):
        producer.produce(topic, value=b"x", partition=0 if i < 10 else 1)
    assert producer.flush(10) == 0
    ledger_path = str(tmp_path / "ledger")
    known_ledger(ledger_path, group, topic)
    out = tmp_path / "lag.png"
    args = ["lag-plot", group, "-b", bootstrap_servers, "--offsets-table", ledger_path]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 partition(s), 6 ledger row(s)" in result.output
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000  # two panels with lines, not an empty canvas

    empty = CliRunner().invoke(
        main,
        [*args[:1], "other", *args[2:], "--offsets-table", str(tmp_path / "no"), "--out", str(out)],
    )
    assert empty.exit_code == 1
    assert "no rows" in empty.output
