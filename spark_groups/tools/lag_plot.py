"""``spark-groups lag-plot``: how far behind the group was, per partition, over time.

The top panel is the committed position per partition (the ledger's rule), with the log end
*now* dashed; the bottom one the lag at commit time (:mod:`spark_groups.tools.lag`). A ledger
without ``log_end`` values cannot give that: its bottom panel shows records behind the log
end now instead, and says so in its title.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from spark_groups.ledger import positions_over_time
from spark_groups.offsets import TopicPartition
from spark_groups.tools.lag import lag_at_commit

TITLE = "committed position per partition; dashed: log end now"
AT_COMMIT_TITLE = "lag at commit time (log end seen at the commit - committed position)"
BEHIND_TITLE = "records behind the CURRENT log end (no log ends in this ledger)"


@dataclass(frozen=True)
class LagSeries:
    """One partition's points: commit times, positions, and records behind ``log_end``."""

    times: list[datetime]
    positions: list[int]
    log_end: int
    #: ``(commit time, lag at commit time)`` where the ledger recorded the log end.
    at_commit: list[tuple[datetime, int]]

    @property
    def behind(self) -> list[int]:
        """``log_end - position`` at each point (never negative)."""
        return [max(0, self.log_end - p) for p in self.positions]


def lag_series(
    history: pa.Table, log_ends: Mapping[TopicPartition, int]
) -> dict[TopicPartition, LagSeries]:
    """Per partition of ``history`` (ledger rows) with a known log end, its series."""
    at_commit = lag_at_commit(history)
    series = {}
    for tp, points in sorted(positions_over_time(history).items()):
        if tp in log_ends:
            series[tp] = LagSeries(
                [t for t, _ in points],
                [p for _, p in points],
                log_ends[tp],
                at_commit.get(tp, []),
            )
    return series


def draw(series: Mapping[TopicPartition, LagSeries], out: str | Path, group: str) -> Path:
    """Draw ``series`` into the PNG file ``out`` (matplotlib, Agg backend); return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 7))
    recorded = any(s.at_commit for s in series.values())
    try:
        for tp, s in series.items():
            (line,) = top.step(s.times, s.positions, where="post", marker="o", ms=3, label=str(tp))
            top.axhline(s.log_end, linestyle="--", color=line.get_color(), linewidth=0.8)
            if recorded:
                times, lags = [t for t, _ in s.at_commit], [lag for _, lag in s.at_commit]
                bottom.plot(times, lags, marker="o", ms=3, color=line.get_color(), label=str(tp))
            else:
                bottom.step(s.times, s.behind, where="post", marker="o", ms=3, label=str(tp))
        fig.suptitle(f"group {group}")
        top.set_title(TITLE, fontsize=10)
        top.set_ylabel("offset")
        bottom.set_title(AT_COMMIT_TITLE if recorded else BEHIND_TITLE, fontsize=10)
        bottom.set_ylabel("records")
        bottom.set_xlabel("commit time (UTC)")
        if series:
            top.legend(fontsize=8, loc="upper left")
        fig.autofmt_xdate()
        path = Path(out)
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)
    return path
