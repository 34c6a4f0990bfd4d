"""The group's positions replayed over a ledger's history, row by row (for lag and plots).

The rule is :meth:`~spark_groups.ledger.offset_ledger.OffsetLedger.latest_positions`': a partition's
position is the highest ``until_offset`` since its last reset marker, the marker included.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pyarrow as pa

from spark_groups.ledger.rows import RESET_BATCH
from spark_groups.offsets import TopicPartition


def rows_with_positions(history: pa.Table) -> Iterator[tuple[dict, int]]:
    """Each row of ``history`` (rows of
    :meth:`~spark_groups.ledger.offset_ledger.OffsetLedger.history`) in commit order, with its
    partition's position after it: the highest ``until_offset`` since the last reset
    marker."""
    rows = sorted(history.to_pylist(), key=lambda r: (r["committed_at"], r["batch"] == RESET_BATCH))
    positions: dict[TopicPartition, int] = {}
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        until = row["until_offset"]
        if row["batch"] == RESET_BATCH or tp not in positions:
            positions[tp] = until
        else:
            positions[tp] = max(positions[tp], until)
        yield row, positions[tp]


def positions_over_time(history: pa.Table) -> dict[TopicPartition, list[tuple[datetime, int]]]:
    """The group's position per partition after each row of ``history``
    (:func:`rows_with_positions`). The last point of each series is what
    ``latest_positions`` returns for the same rows."""
    series: dict[TopicPartition, list[tuple[datetime, int]]] = {}
    for row, position in rows_with_positions(history):
        tp = TopicPartition(row["topic"], row["partition"])
        series.setdefault(tp, []).append((row["committed_at"], position))
    return series
