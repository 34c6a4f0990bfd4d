"""Scale: driver planning time and memory with many partitions; ledger commit time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.common import create_topics, percentile, unique

ROOT = Path(__file__).resolve().parent.parent


def planner(
    mode: str,
    servers: str,
    topics: list[str],
    partitions: int,
    rounds: int,
    scratch: Path,
    **extra: Any,
) -> dict[str, Any]:
    """Run :mod:`bench.planner_proc` in a fresh process; return its result."""
    args = {
        **extra,
        "mode": mode,
        "servers": servers,
        "topics": topics,
        "partitions": partitions,
        "rounds": rounds,
        "scratch": str(scratch),
    }
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("SPARK_GROUPS_LOG_LEVEL", "WARNING")
    done = subprocess.run(
        [sys.executable, "-m", "bench.planner_proc", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=str(ROOT),
        check=False,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"planner_proc {mode} failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    result["batch_p50_s"] = percentile(result["batch_s"], 0.5)
    return result


def ledger_commits(servers: str, batches: int, partitions: int, window: int) -> dict[str, Any]:
    """Append ``batches`` batches to a ledger maintained as the source's is (its default
    ``compact_every``); interleaved, commit
    the same offsets to Kafka with a plain consumer (the baseline). Returns the p50/p95 of
    both over the last ``window`` batches."""
    from spark_groups.ledger import LedgerRow, OffsetLedger

    topic = create_topics(servers, partitions, prefix="ledger")[0]
    root = Path(tempfile.mkdtemp(prefix="ledger-", dir=os.environ.get("BENCH_SCRATCH")))
    ledger = OffsetLedger(str(root / "ledger"), "bench-group")
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": unique("ledger-base"),
            "enable.auto.commit": False,
        }
    )
    ledger_s: list[float] = []
    kafka_s: list[float] = []
    started = time.perf_counter()
    try:
        for batch in range(batches):
            now = datetime.now(UTC)
            rows = [
                LedgerRow(topic, p, batch * 100, batch * 100 + 100, "member-1", 1, batch, now)
                for p in range(partitions)
            ]
            t0 = time.perf_counter()
            ledger.append(rows)
            ledger_s.append(time.perf_counter() - t0)
            offsets = [KafkaTopicPartition(topic, p, batch * 100 + 100) for p in range(partitions)]
            t0 = time.perf_counter()
            consumer.commit(offsets=offsets, asynchronous=False)
            kafka_s.append(time.perf_counter() - t0)
    finally:
        consumer.close()
    window = max(1, min(window, batches))
    last_l, last_k = ledger_s[-window:], kafka_s[-window:]
    return {
        "batches": batches,
        "compact_every": ledger.compact_every,
        "partitions": partitions,
        "window": window,
        "ledger_p50_s": percentile(last_l, 0.5),
        "ledger_p95_s": percentile(last_l, 0.95),
        "kafka_p50_s": percentile(last_k, 0.5),
        "kafka_p95_s": percentile(last_k, 0.95),
        "total_s": time.perf_counter() - started,
    }
