"""The soak's reading of a run's batches (bench/scenarios/_soak_watch.py), on a table and a
checkpoint made here: no Spark, no broker."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from bench.scenarios._soak_watch import BatchWatch, quantile, window


def _stamps(*ms: int) -> pa.Array:
    return pa.array([datetime.fromtimestamp(m / 1000, UTC) for m in ms], pa.timestamp("us", "UTC"))


def test_each_commit_s_latency_and_each_batch_s_duration(tmp_path: Path) -> None:
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    write_deltalake(
        table, pa.table({"id": [1, 2], "timestamp": _stamps(now_ms - 900, now_ms - 100)})
    )
    write_deltalake(table, pa.table({"id": [3], "timestamp": _stamps(now_ms - 50)}), mode="append")
    for folder in ("offsets", "commits"):
        (checkpoint / folder).mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1")
    (checkpoint / "commits" / "0").write_text("v1")
    os.utime(checkpoint / "offsets" / "0", (100.0, 100.0))
    os.utime(checkpoint / "commits" / "0", (100.25, 100.25))
    (checkpoint / "offsets" / "1").write_text("v1")  # planned, not done: not read yet

    watch = BatchWatch(table, checkpoint)
    watch.poll()

    assert [c["records"] for c in watch.commits] == [2.0, 1.0]
    first, second = watch.commits
    lines = (table / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    (at,) = [a["commitInfo"]["timestamp"] for a in map(json.loads, lines) if "commitInfo" in a]
    assert first["oldest_ms"] == at - (now_ms - 900)  # the batch's oldest record
    assert first["newest_ms"] == at - (now_ms - 100)
    assert second["oldest_ms"] == second["newest_ms"] >= 0
    assert [round(b["duration_ms"]) for b in watch.batches] == [250]
    (checkpoint / "commits" / "1").write_text("v1")
    watch.poll()  # only what is new
    assert len(watch.batches) == 2 and len(watch.commits) == 2


def test_quantiles_and_windows() -> None:
    assert quantile([], 0.99) == 0.0
    assert quantile([float(v) for v in range(1, 101)], 0.99) == 100.0
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    rows = [{"at_s": float(t)} for t in range(10)]
    assert [r["at_s"] for r in window(rows, 2.0, 5.0)] == [2.0, 3.0, 4.0]
