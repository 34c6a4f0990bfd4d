"""The soak's batches as they happen: each batch's duration and its records' latency.

Read while the job runs, since the table's log clean-up (15 minutes on the new defaults) and
Spark's checkpoint clean-up delete what a reading at the end would need:

- a **batch's duration**: from Spark writing its offset-log entry (``offsets/N``, planned) to
  its commit-log entry (``commits/N``, done), by the files' times;
- a **record's latency, produced to visible**: from its Kafka timestamp (the producer's
  clock, this machine) to the commit that made it visible in the table (the commit info's
  timestamp). Per sink commit, the oldest record's (the batch's worst) and the newest's (its
  best), from the ``timestamp`` column of the files it added (the sink keeps no timestamp
  stats).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


@dataclass
class BatchWatch:
    """What the soak has read of the table's commits and the checkpoint's batches so far."""

    table: Path
    checkpoint: Path
    commits: list[dict[str, float]] = field(default_factory=list)
    batches: list[dict[str, float]] = field(default_factory=list)
    _version: int = 0
    _batch: int = 0

    def poll(self) -> None:
        """Read every commit and every finished batch since the last poll."""
        log = self.table / "_delta_log"
        while (entry := log / f"{self._version:020d}.json").exists():
            self._read_commit(entry)
            self._version += 1
        offsets, done = self.checkpoint / "offsets", self.checkpoint / "commits"
        while (finished := done / str(self._batch)).exists():
            planned = offsets / str(self._batch)
            if planned.exists():
                self.batches.append(
                    {
                        "at_s": finished.stat().st_mtime,
                        "duration_ms": (finished.stat().st_mtime - planned.stat().st_mtime) * 1e3,
                    }
                )
            self._batch += 1

    def _read_commit(self, entry: Path) -> None:
        committed, oldest, newest, records = None, None, None, 0
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                committed = action["commitInfo"].get("timestamp")
            add = action.get("add")
            if add and add.get("dataChange"):
                stamps = pq.read_table(self.table / unquote(add["path"]), columns=["timestamp"])
                column = stamps.column("timestamp")
                column = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
                if not len(column):
                    continue
                bounds = pc.min_max(column)
                low, high = bounds["min"].as_py() / 1e3, bounds["max"].as_py() / 1e3
                records += len(column)
                oldest = low if oldest is None else min(oldest, low)
                newest = high if newest is None else max(newest, high)
        if committed is None or oldest is None or newest is None or not records:
            return  # not a batch's commit (claims, leases, compaction) or no stats
        self.commits.append(
            {
                "at_s": committed / 1000.0,
                "oldest_ms": committed - oldest,
                "newest_ms": committed - newest,
                "records": float(records),
            }
        )


#: The ingest job's line for a finished batch (``jobs/ingest.py`` ``batch_line``), with its
#: log record's time: the trigger's wall time and Spark's phases of it (anywhere in a line:
#: Spark's console progress bar may precede it).
BATCH_LINE = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*? batch (\d+): (\d+) records.*?; "
    r"(\d+) ms(?: \((.*)\))?$"
)


def batch_lines(text: str) -> list[dict[str, float]]:
    """Every finished batch the job logged: ``at_s`` (its line's time, this machine's clock),
    ``batch``, ``records``, ``trigger_ms`` and each phase's ms (``addBatch_ms``, ...)."""
    rows = []
    for line in text.splitlines():
        if not (m := BATCH_LINE.search(line)):
            continue
        at = time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")) + int(m[2]) / 1e3
        row = {"at_s": at, "batch": float(m[3]), "records": float(m[4]), "trigger_ms": float(m[5])}
        for phase in (m[6] or "").split(", "):
            if phase:
                name, ms = phase.rsplit(" ", 1)
                row[f"{name}_ms"] = float(ms)
        rows.append(row)
    return rows


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def window(rows: list[dict[str, float]], start_s: float, end_s: float) -> list[dict[str, float]]:
    """The rows whose ``at_s`` lies in [``start_s``, ``end_s``)."""
    return [r for r in rows if start_s <= r["at_s"] < end_s]
