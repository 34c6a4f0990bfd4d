"""Lag at commit time, from the ledger: how far behind the group was when it committed.

Each batch's ledger row carries the partition's log end seen at the commit (``log_end``), so
``log_end - position`` is the lag at that moment, as lag tools such as Burrow evaluate it;
rows without a log end give no point. :func:`trend` fits a straight line through a
partition's newest points: its slope, in records per minute, says whether the lag grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from spark_groups.ledger import RESET_BATCH, rows_with_positions
from spark_groups.offsets import TopicPartition

#: How many of the newest points :func:`trend` fits.
TREND_POINTS = 20
#: Below this many records per minute, either way, a trend is "steady".
STEADY_PER_MIN = 1.0


def lag_at_commit(history: pa.Table) -> dict[TopicPartition, list[tuple[datetime, int]]]:
    """Per partition, ``(commit time, lag at commit time)`` for every row of ``history``
    (:meth:`OffsetLedger.history` rows) that carries a log end, oldest first. The position
    follows the ledger's rule (the highest ``until_offset`` since the last reset)."""
    out: dict[TopicPartition, list[tuple[datetime, int]]] = {}
    for row, position in rows_with_positions(history):
        log_end = row.get("log_end")
        if log_end is not None and row["batch"] != RESET_BATCH:
            tp = TopicPartition(row["topic"], row["partition"])
            out.setdefault(tp, []).append((row["committed_at"], max(0, log_end - position)))
    return out


def trend(points: Sequence[tuple[datetime, int]], newest: int = TREND_POINTS) -> float | None:
    """The least-squares slope of the newest ``newest`` points, in records per minute; None
    with fewer than three points or no time between them."""
    recent = list(points)[-newest:]
    if len(recent) < 3:
        return None
    t0 = recent[0][0]
    xs = [(t - t0).total_seconds() / 60.0 for t, _ in recent]
    ys = [float(lag) for _, lag in recent]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def describe_trend(slope: float | None) -> str:
    """``growing``, ``shrinking`` or ``steady`` (with the slope), or ``unknown``."""
    if slope is None:
        return "unknown"
    if abs(slope) < STEADY_PER_MIN:
        return "steady"
    return f"{'growing' if slope > 0 else 'shrinking'} ({slope:+.0f}/min)"
