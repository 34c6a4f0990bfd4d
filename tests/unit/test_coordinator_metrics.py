"""Coordinator metrics: the snapshot, and reading it back from a progress."""

from __future__ import annotations

import json

from spark_groups.metrics import (
    METRICS_KEY,
    StreamMetrics,
    coordinator_metrics,
    kafka_source_metrics,
    latest_offset_json,
    log_end_offsets,
    snapshot,
)
from spark_groups.offsets import TopicPartition

A, B, C = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("orders", 2)


def test_snapshot_counts_lag_over_owned_committed_partitions() -> None:
    counters = StreamMetrics(failed_commits=2, barrier_timeouts=1, last_rebalance_at=1000.0)
    counters.extra["slow_batches"] = 3
    got = snapshot(
        counters,
        member_id="m-1",
        generation=7,
        assignment=frozenset({A, B}),
        rebalances=4,
        log_ends={A: 100, B: 50, C: 900},  # C is no longer owned: not this member's lag
        committed={A: 60},  # B never committed: no lag known, as in kafka-consumer-groups
        now=1012.5,
    )
    assert got["lag"] == 40
    assert got["assigned_partitions"] == 2 and got["generation"] == 7 and got["rebalances"] == 4
    assert got["last_rebalance_age_s"] == 12.5
    assert (got["failed_commits"], got["barrier_timeouts"], got["slow_batches"]) == (2, 1, 3)
    json.dumps(got)  # must be JSON for Spark


def test_metrics_read_back_from_a_progress_json() -> None:
    latest = latest_offset_json({A: 100, B: 50}, {"lag": 5, "generation": 3})
    progress = {
        "sources": [
            {"description": "KafkaV2[Subscribe[other]]", "latestOffset": '{"other": {"0": 9}}'},
            {"description": "kafka-group", "latestOffset": json.dumps(latest)},
        ]
    }
    assert coordinator_metrics(json.dumps(progress)) == [
        {"description": "kafka-group", "lag": 5, "generation": 3}
    ]
    assert log_end_offsets(progress["sources"][1]) == {"orders": {"0": 100, "1": 50}}
    assert METRICS_KEY not in log_end_offsets(progress["sources"][1])
    assert coordinator_metrics({"sources": [{"latestOffset": None}]}) == []


def test_offsets_behind_latest_use_sparks_names_and_string_values() -> None:
    got = snapshot(
        StreamMetrics(),
        member_id="m-1",
        generation=1,
        assignment=frozenset({A, B}),
        rebalances=1,
        log_ends={A: 100, B: 50, C: 900},
        committed={},
        planned={A: 70, B: 50, C: 0},  # C is not owned any more
    )
    assert got["minOffsetsBehindLatest"] == 0
    assert got["maxOffsetsBehindLatest"] == 30
    assert got["avgOffsetsBehindLatest"] == 15.0
    progress = {"sources": [{"description": "k", "latestOffset": latest_offset_json({}, got)}]}
    assert kafka_source_metrics(json.dumps(progress)) == [
        {
            "minOffsetsBehindLatest": "0",
            "maxOffsetsBehindLatest": "30",
            "avgOffsetsBehindLatest": "15.0",
        }
    ]


def test_nothing_planned_reports_no_offsets_behind_latest() -> None:
    got = snapshot(
        StreamMetrics(),
        member_id="m",
        generation=1,
        assignment=frozenset({A}),
        rebalances=1,
        log_ends={A: 10},
        committed={},
    )
    assert "minOffsetsBehindLatest" not in got
