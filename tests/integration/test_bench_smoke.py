"""The benchmark suite's tiny variant runs end to end and yields sane numbers (not speeds)."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from bench.harness.docs import with_markers
from bench.harness.procfs import executor_read_path
from bench.scenarios._core_report import render, write_plot
from bench.scenarios._soak_watch import BatchWatch, batch_lines, quantile, window
from bench.scenarios.core import SECTION, TINY, run_all
from spark_groups.tools.spark_jars import spark_jars

from support.broker import create_topic

pytestmark = pytest.mark.integration


def _positive(x: float) -> bool:
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def test_tiny_benchmark_run(spark, bootstrap_servers: str, tmp_path: Path) -> None:
    spark_jars("spark-kafka")  # Spark's kafka source, the baseline: fetched, or a clear error
    results = run_all(TINY, spark, bootstrap_servers, tmp_path, say=lambda s: None)

    runs = results["throughput"]["runs"]
    assert set(runs) == {
        "plain", "read_range", "spark_ceiling", "spark_kafka", "noop", "delta-group",
    }  # fmt: skip
    for name, run in runs.items():
        assert run["rows"] == TINY.records, name  # every path counted every record produced
        assert _positive(run["rate"]), name
    assert runs["delta-group"]["written"] == TINY.records
    spark_delta = results["throughput"]["spark_delta"]  # Spark's own Delta sink (pyspark 4.2)
    assert spark_delta["noop"]["rows"] == spark_delta["delta"]["rows"] == TINY.records
    assert spark_delta["delta"]["written"] == TINY.records
    assert runs["noop"]["cpu"]["spark"] > 0 and runs["plain"]["cpu"]["bench"] > 0

    for strategy in TINY.strategies:
        for side in ("plain", "spark"):
            res = results["handover"][strategy][side]
            assert _positive(res["to_partitions_s"]), (strategy, side)
            assert res["to_first_record_s"] >= res["to_partitions_s"] > 0, (strategy, side)

    assert [(r["partitions"], r["size"]) for r in results["growth"]] == [(4, 100), (4, 1000)]
    for row in results["growth"]:
        assert row["noop_rows"] == row["records"] == row["spark_kafka_rows"]
        assert _positive(row["plain_rate"]) and _positive(row["noop_rate"])
        assert _positive(row["spark_kafka_rate"])
        assert row["noop_phases_s"]["batches"] >= 1 and _positive(row["noop_phases_s"]["addBatch"])
    # The Python source ceiling is measured for the value sizes other than section 1's.
    assert [_positive(r["ceiling_rate"]) for r in results["growth"]] == [False, True]
    scale = results["scale"]
    for mode in ("stream", "plain", "stream_fetch", "stream_no_ledger"):
        assert scale[mode]["owned"] == TINY.growth_partitions[-1]
        assert _positive(scale[mode]["batch_p50_s"]) and _positive(scale[mode]["rss_mb"])
    assert "latest_offset" in scale["stream_profiled"]["profile"]
    assert _positive(scale["stream"]["memory_mb"]["anonymous"])
    # The profile shows the read path's own loop: the native path's C fill, or librdkafka's
    # consume under the Python path.
    native = executor_read_path().startswith("native")
    assert ("fill" if native else "consume") in results["throughput"]["read_range_profile"]
    ledger = results["ledger"]
    assert ledger["batches"] == TINY.ledger_batches
    assert _positive(ledger["ledger_p50_s"]) and _positive(ledger["kafka_p50_s"])

    results |= {"command": "test", "date": "today", "machine": {"cores": "2"}}
    write_plot(results, tmp_path / "b.png")
    (tmp_path / "b.md").write_text(with_markers(SECTION, render(results)))
    assert (tmp_path / "b.png").stat().st_size > 10_000
    text = (tmp_path / "b.md").read_text()
    assert "## 4. Cost growth" in text and "nan" not in text.lower()
    assert "Delta sinks, per record" in text
    assert "Spark's own Kafka source" in text and "n/a" not in text.split("## 2.")[0]


def test_whole_run_sides_read_every_record(spark, bootstrap_servers: str, tmp_path: Path) -> None:
    """The whole_run scenario's kafka-group side and its Python streaming source floor, tiny."""
    from bench.harness.kafka import produce
    from bench.scenarios.whole_run import spark_run

    topic = create_topic(bootstrap_servers, 2, "whole-smoke")
    produce(bootstrap_servers, [topic], 2, 3000, 100)
    spec = {
        "servers": bootstrap_servers,
        "topic": topic,
        "records": 3000,
        "partitions": 2,
        "size": 100,
        "tuned": {},
        "extra_roots": [],
        "scratch": str(tmp_path),
    }
    runs = {
        side: spark_run(spark, {**spec, "side": side}, None)
        for side in ("python-floor", "kafka-group")
    }
    for side, run in runs.items():
        assert run["rows"] == 3000, side
        assert run["whole_s"] >= run["triggers_s"] > 0, side
    assert runs["python-floor"]["batches"] == 1  # one micro-batch of prebuilt rows


def test_latency_side_measures_every_record_produced(
    spark, bootstrap_servers: str, tmp_path: Path
) -> None:
    """The latency scenario's own side, tiny: kafka-group -> delta-group under a producer;
    every record produced in the window is found visible in the table, with a latency."""
    from argparse import Namespace

    from bench.scenarios.latency import one_side, render

    args = Namespace(warmup=1.0, counted=3.0, size=100)
    found = one_side(
        spark, bootstrap_servers, "kafka-group", "delta-group", 500, args, tmp_path / "side"
    )
    latency = found["latency"]
    assert latency["records"] > 0 and latency["missing"] == 0
    assert 0 < latency["p50"] <= latency["p99"] <= latency["max"] < 60_000
    assert latency["batches"] >= 1 and found["phases"]["addBatch"] >= 0
    assert found["compaction"]["files_after"] <= found["compaction"]["files_before"]
    results = {"command": "python -m bench latency", "when": "now", "load_before": "0",
               "size": 100, "warmup": 1.0, "counted": 3.0,
               "sides": {"kafka-group -> `delta-group` (`offsets.table` and `sink.table` set)":
                         {"500": found}}}  # fmt: skip
    assert "| kafka-group -> `delta-group`" in render(results)


def test_members_scenario_counts_every_record_of_a_small_group(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """The members-per-table scenario, tiny: three simulated members on one table; every
    record once, batches counted with their commit times, the table's log measured."""
    from argparse import Namespace

    from bench.scenarios.members import render, run_one

    args = Namespace(partitions=6, rate=200, trigger=0.5, seconds=3, compact_every=0)
    found = run_one(bootstrap_servers, str(tmp_path), {}, tmp_path, 3, args)
    assert found["failures"] == [] and found["batches"] >= 3
    assert found["records"]["sent"] > 0 and found["records"]["rows"] == found["records"]["sent"]
    assert not any(found["records"][k] for k in ("missing", "duplicated", "offsets_twice"))
    assert 0 < found["commit_p50_ms"] <= found["commit_p99_ms"] and found["cpu_p50_ms"] > 0
    assert found["log"]["commits"] >= found["batches"]
    results = {"command": "python -m bench members", "when": "now", "load_before": "0",
               "machine": {"cores": "2"}, "args": {**vars(args)},
               "runs": [{"store": "local", "members": 3, **found}]}  # fmt: skip
    assert "| local | 3 |" in render(results)


def test_rolling_scenario_with_simulated_members(bootstrap_servers: str, tmp_path: Path) -> None:
    """The rolling pass with simulated members (the big group's restart of issue 45), tiny:
    three members and a plain consumer on KIP-848, each member restarted in turn; every
    record handled, none twice in the table, the unread times and the history measured."""
    from argparse import Namespace

    from bench.scenarios.rolling import run_way

    args = Namespace(sim=3, partitions=6, rate=100, trigger="0.5 seconds", settle=2.0,
                     timeout=120.0, static_session_ms=30_000, pause=0.0)  # fmt: skip
    found = run_way("kip848", bootstrap_servers, tmp_path, args, lambda line: None)
    assert [r["member"] for r in found["restarts"]] == ["m00", "m01", "m02"]
    assert found["lost"] == 0 and found["duplicated_by_cause"]["in_table_twice"] == 0
    assert found["in_table"] > 0 and found["produced"] >= found["in_table"]
    # Each restart's join moves the group to a new epoch that the history or the service
    # records. Not revocations: a member back within a heartbeat of leaving takes its
    # partitions again before the others were handed them (KIP-848), so a pass may revoke
    # nothing (a CI run on a loaded machine did).
    events = {k: found[k] for k in ("restarts", "revocations", "generations")}
    assert 0 < found["longest_unread_s"] < 120 and found["rebalances"] >= 3, events
    waits = found["record_waits_s"]
    assert waits["records"] > 0 and 0 < waits["p50"] <= waits["p99"] <= waits["max"] < 120


def test_partitions_scenario_tiny(bootstrap_servers: str) -> None:
    """The many-partitions run (issue 45) at 8 partitions: two members, counted batches, a
    restart; every record once, the driver's wall and CPU time and the resume measured."""
    from argparse import Namespace

    from bench.scenarios.partitions import render, run_one

    args = Namespace(topics=2, seconds=3, trigger=0.5)
    found = run_one(bootstrap_servers, 8, args)
    assert found["failures"] == [] and found["rows_per_batch_p50"] > 0
    assert found["records"]["rows"] == found["records"]["sent"] > 0
    assert found["records"]["offsets_twice"] == 0
    assert 0 < found["driver_cpu_p50_ms"] <= found["driver_p50_ms"] and found["resume_s"] > 0
    results = {"command": "python -m bench partitions", "when": "now", "load_before": "0",
               "args": {**vars(args)}, "runs": [{"partitions": 8, **found}]}  # fmt: skip
    assert "| 8 | " in render(results)


def test_long_run_tables_load_and_stay_small_on_the_new_defaults() -> None:
    from argparse import Namespace

    from bench.scenarios import long_run

    args = Namespace(stores="local", policies="today,new", milestones="300,3000",
                     today_up_to=3000, today_up_to_remote=0, trigger=1.0, files=2, batches=5,
                     threads=4, log_retention="")  # fmt: skip
    results = long_run.run(args)
    by = {(r["policy"], r["commits"]): r for r in results["rows"]}
    assert set(by) == {("today", 300), ("today", 3000), ("new", 300), ("new", 3000)}
    # Today's: every batch's files live and every commit file kept; the new defaults: a
    # compacted table whose log starts at a checkpoint 15 minutes back (3,000 s of history).
    assert by[("today", 3000)]["live_files"] >= 2 * 3000
    assert by[("today", 3000)]["log_entries"] > 3000
    assert by[("new", 3000)]["live_files"] < 2 * 200
    assert by[("new", 3000)]["log_entries"] < 1100
    for row in results["rows"]:
        assert row["commit"]["upkeep"]["failures"] == 0, row
        assert _positive(row["commit"]["p99"]) and _positive(row["read"]["load_median"])
        assert _positive(row["read"]["scan_ms"])
    text = long_run.render({**results, "command": "python -m bench long-run", "when": "now"})
    assert "| new | 3,000 |" in text and "| today | 300 |" in text


# The soak's reading of a run's batches (bench/scenarios/_soak_watch.py), on a table and a
# checkpoint made here.


def _stamps(*ms: int) -> pa.Array:
    return pa.array([datetime.fromtimestamp(m / 1000, UTC) for m in ms], pa.timestamp("us", "UTC"))


def test_soak_reads_each_commits_latency_and_each_batchs_duration(tmp_path: Path) -> None:
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


def test_soak_quantiles_and_windows() -> None:
    assert quantile([], 0.99) == 0.0
    assert quantile([float(v) for v in range(1, 101)], 0.99) == 100.0
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    rows = [{"at_s": float(t)} for t in range(10)]
    assert [r["at_s"] for r in window(rows, 2.0, 5.0)] == [2.0, 3.0, 4.0]


def test_soak_reads_the_jobs_batch_lines_with_spark_phases() -> None:
    # The ingest job's line (jobs/ingest.py batch_line), after Spark's console progress bar,
    # and an older line without timing, which says nothing of the phases.
    text = (
        "[Stage 3:=====>   (2 + 1) / 6]2026-12-03 20:24:01,123 INFO spark_groups.jobs.ingest "
        "batch 5: 2000 records, lag 3, 6 partitions assigned (generation 1, 1 rebalances); "
        "312 ms (latestOffset 20, walCommit 15, addBatch 250, commitOffsets 12)\n"
        "2026-12-03 20:24:02,000 INFO spark_groups.jobs.ingest batch 6: 10 records, lag 0\n"
        "2026-12-03 20:24:03,500 INFO spark_groups.group.committer committed batch 5\n"
    )
    (row,) = batch_lines(text)
    assert row["batch"] == 5 and row["records"] == 2000 and row["trigger_ms"] == 312
    assert (row["latestOffset_ms"], row["addBatch_ms"], row["commitOffsets_ms"]) == (20, 250, 12)
    assert row["at_s"] % 1 == pytest.approx(0.123)
