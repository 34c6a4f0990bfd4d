"""Lag at commit time from ledger rows, and its trend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from spark_groups.ledger import LEDGER_SCHEMA, OUTSIDE_BATCH, RESET_BATCH
from spark_groups.offsets import TopicPartition
from spark_groups.tools.lag import describe_trend, lag_at_commit, trend

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
P0 = TopicPartition("t", 0)


def history(*rows: tuple[int, int, int, int, int | None]) -> pa.Table:
    """Rows ``(second, batch, from, until, log_end)`` of partition t-0."""
    return pa.Table.from_pylist(
        [
            {
                "group_id": "g",
                "topic": "t",
                "partition": 0,
                "from_offset": lo,
                "until_offset": hi,
                "member_id": "m",
                "generation": 1,
                "batch": batch,
                "committed_at": T0 + timedelta(seconds=second),
                "log_end": log_end,
            }
            for second, batch, lo, hi, log_end in rows
        ],
        schema=LEDGER_SCHEMA,
    )


def test_lag_at_commit_is_the_log_end_seen_minus_the_position() -> None:
    got = lag_at_commit(
        history(
            (1, 0, 0, 10, 15),
            (2, 1, 10, 20, 40),
            (3, 0, 0, 10, 50),  # a replay of an old range: the position does not move back
            (4, RESET_BATCH, 20, 5, None),  # a reset marker: no point, the position moves
            (5, 2, 5, 30, 30),
            (6, OUTSIDE_BATCH, 30, 35, None),  # outside offsets: no log end, no point
            (7, 3, 35, 36, None),  # written before the column existed
        )
    )
    seconds = [(t - T0).total_seconds() for t, _ in got[P0]]
    assert seconds == [1, 2, 3, 5]
    assert [lag for _, lag in got[P0]] == [5, 20, 30, 0]


def test_trend_is_the_slope_in_records_per_minute() -> None:
    growing = [(T0 + timedelta(minutes=m), 100 * m) for m in range(5)]
    assert trend(growing) == 100.0
    assert describe_trend(trend(growing)) == "growing (+100/min)"
    shrinking = [(t, 1000 - lag) for t, lag in growing]
    assert describe_trend(trend(shrinking)) == "shrinking (-100/min)"
    flat = [(t, 7) for t, _ in growing]
    assert describe_trend(trend(flat)) == "steady"
    assert trend(growing[:2]) is None and describe_trend(None) == "unknown"
    # Only the newest points count: an old surge does not hide today's recovery.
    assert trend(growing + shrinking[1:], newest=4) == -100.0
