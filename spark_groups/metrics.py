"""Coordinator metrics of a ``kafka-group`` query, carried in its streaming progress.

A Python source has no metrics hook, so the source returns its log end offsets from
``reportLatestOffset`` (Spark shows them as ``sources[].latestOffset``, in the shape of
Spark's kafka source) plus one key, :data:`METRICS_KEY`, holding :func:`snapshot` of the
member's metrics (``@`` never appears in a topic name). :func:`coordinator_metrics` and
:func:`log_end_offsets` read them back from a progress. The metrics and how to alert on them:
docs/metrics.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_groups.offsets import TopicPartition, positions_to_json

#: The key of ``sources[].latestOffset`` holding the coordinator metrics.
METRICS_KEY = "@coordinator"


@dataclass
class StreamMetrics:
    """Counters an operator watches (also logged), kept by the driver's ``GroupStream``."""

    batches_planned: int = 0
    batches_committed: int = 0
    failed_commits: int = 0
    revocations: int = 0
    last_barrier_wait_s: float = 0.0
    barrier_timeouts: int = 0
    lost_partitions: int = 0
    last_commit_ms: float = 0.0
    last_rebalance_at: float | None = None  # time.time() of the last assignment
    extra: dict[str, Any] = field(default_factory=dict)


def snapshot(
    counters: StreamMetrics,
    *,
    member_id: str,
    generation: int,
    assignment: frozenset[TopicPartition],
    rebalances: int,
    log_ends: Mapping[TopicPartition, int],
    committed: Mapping[TopicPartition, int],
    planned: Mapping[TopicPartition, int] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The coordinator metrics of one member, as a JSON-ready dict.

    ``counters`` is the stream's :class:`StreamMetrics`; ``log_ends`` are the log end offsets seen
    at the last plan and ``committed`` the committed offsets (next offset to read): ``lag`` is
    the records between the two, over owned partitions with a committed offset (as
    ``kafka-consumer-groups.sh`` shows no lag for a partition the group never committed).

    ``planned`` are the positions after the last planned batch (where the next one starts):
    ``min/max/avgOffsetsBehindLatest`` are Spark's kafka source metrics of the same names
    (log end minus the end of the batch being reported, over the member's partitions),
    absent when nothing has been planned.
    """
    now = time.time() if now is None else now
    last = counters.last_rebalance_at
    lag = sum(
        max(0, end - committed[tp])
        for tp, end in log_ends.items()
        if tp in assignment and tp in committed
    )
    return {
        "member_id": member_id,
        "generation": generation,
        "assigned_partitions": len(assignment),
        # In the group with nothing to read: more members than partitions (a healthy spare).
        "idle": generation >= 0 and not assignment,
        "rebalances": rebalances,
        "last_rebalance_age_s": round(now - last, 3) if last is not None else None,
        "revocations": counters.revocations,
        "last_barrier_wait_s": round(counters.last_barrier_wait_s, 3),
        "barrier_timeouts": counters.barrier_timeouts,
        "lost_partitions": counters.lost_partitions,
        "failed_commits": counters.failed_commits,
        "batches_planned": counters.batches_planned,
        "batches_committed": counters.batches_committed,
        "last_commit_ms": round(counters.last_commit_ms, 1),
        "slow_batches": counters.extra.get("slow_batches", 0),
        "held_partitions": counters.extra.get("held_partitions", 0),
        "lag": lag,
        **offsets_behind_latest(log_ends, planned or {}, assignment),
    }


#: Spark's kafka source's own metric names (``KafkaMicroBatchStream.metrics``).
SPARK_KAFKA_METRICS = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")


def offsets_behind_latest(
    log_ends: Mapping[TopicPartition, int],
    planned: Mapping[TopicPartition, int],
    assignment: frozenset[TopicPartition],
) -> dict[str, int | float]:
    """Spark's kafka source metrics: how far each owned partition's log end is beyond where
    the last planned batch ends; min, max and mean over those partitions ({} when none)."""
    behind = [
        max(0, end - planned[tp])
        for tp, end in log_ends.items()
        if tp in assignment and tp in planned
    ]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": min(behind),
        "maxOffsetsBehindLatest": max(behind),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }


def latest_offset_json(
    log_ends: Mapping[TopicPartition, int], metrics: Mapping[str, Any]
) -> dict[str, Any]:
    """What ``reportLatestOffset`` returns: the log ends by topic, plus the metrics."""
    return {**positions_to_json(log_ends), METRICS_KEY: dict(metrics)}


def _sources(progress: Any) -> list[Mapping[str, Any]]:
    """The ``sources`` of a progress given as a dict (pyspark's StreamingQueryProgress is
    one) or its JSON string."""
    if isinstance(progress, str):
        progress = json.loads(progress)
    return list(progress["sources"]) if progress else []


def _latest(source: Mapping[str, Any]) -> dict[str, Any] | None:
    latest = source.get("latestOffset")
    if isinstance(latest, str):
        try:
            latest = json.loads(latest)
        except ValueError:
            return None
    return latest if isinstance(latest, dict) else None


def coordinator_metrics(progress: Any) -> list[dict[str, Any]]:
    """The coordinator metrics of every ``kafka-group`` source in one query progress.

    ``progress`` is ``query.lastProgress``, a listener event's ``progress``, its ``json``, or
    the parsed dict. Each entry is :func:`snapshot`'s dict plus ``description`` (Spark's name
    for the source). Sources that are not ``kafka-group`` are skipped.
    """
    found = []
    for source in _sources(progress):
        latest = _latest(source)
        if latest is not None and isinstance(latest.get(METRICS_KEY), dict):
            found.append({"description": source.get("description", ""), **latest[METRICS_KEY]})
    return found


def log_end_offsets(source: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """One progress source's log end offsets, ``{topic: {partition: offset}}``, without the
    metrics (the shape Spark's kafka source reports as ``latestOffset``)."""
    latest = _latest(source) or {}
    return {k: v for k, v in latest.items() if k != METRICS_KEY}


def kafka_source_metrics(progress: Any) -> list[dict[str, str]]:
    """For each ``kafka-group`` source of a progress, the map Spark's kafka source reports as
    ``sources[].metrics`` (``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
    ``avgOffsetsBehindLatest``; string values, as Spark's): so a dashboard or alert written
    for ``format("kafka")`` reads ``kafka_source_metrics(p)[i]`` where it read
    ``p["sources"][i]["metrics"]``."""
    return [
        {name: str(m[name]) for name in SPARK_KAFKA_METRICS if name in m}
        for m in coordinator_metrics(progress)
    ]
