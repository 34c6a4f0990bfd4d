"""Driver time per batch by ``endOffsets`` mode, on Apache Kafka and on Tansu, side by side.

    python -m bench end_offsets --write-docs [--partitions 1000] [--rounds 10]

* the sides (:data:`RUNS`): ``listOffsets``, ``fetch`` and ``auto`` on Apache Kafka, ``fetch``
  and ``auto`` on the embedded Tansu (``listOffsets`` is wrong there), both brokers started
  here;
* the records: ``--partitions`` (1,000) over 4 topics, one record each, then one new record
  per partition before every batch;
* the rounds: ``--rounds`` (10) batches of the driver-side planner
  (:mod:`bench.harness.planner`: a ``GroupStream`` with its ledger, driven as Spark drives
  it) per side; p50 and max.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.harness.kafka import broker, create_topics, produce
from bench.harness.planner import planner

SECTION = "end-offsets"
#: (broker, mode) pairs worth measuring: listOffsets is wrong on Tansu, so it is left out.
RUNS = [("kafka", "listOffsets"), ("kafka", "fetch"), ("kafka", "auto"),
        ("tansu", "fetch"), ("tansu", "auto")]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)


def run(args: argparse.Namespace, topics: int = 4) -> dict[str, Any]:
    """Planner results for every (broker, mode) in :data:`RUNS`."""
    per_topic = args.partitions // topics
    results = []
    with broker("kafka") as kafka, broker("tansu") as tansu, tempfile.TemporaryDirectory() as d:
        servers = {"kafka": kafka.bootstrap_servers, "tansu": tansu.bootstrap_servers}
        names = {}
        for kind, where in servers.items():
            names[kind] = create_topics(where, per_topic, topics, prefix="ends")
            produce(where, names[kind], per_topic, per_topic * topics, 100)
        for kind, mode in RUNS:
            res = planner(
                "stream", servers[kind], names[kind], per_topic, args.rounds, Path(d),
                end_offsets=mode,
            )  # fmt: skip
            times = sorted(res["batch_s"])
            results.append(
                {"broker": kind, "mode": mode, "p50_ms": times[len(times) // 2] * 1000,
                 "max_ms": times[-1] * 1000, "owned": res["owned"]}
            )  # fmt: skip
            print(results[-1], flush=True)
    return {"partitions": args.partitions, "rounds": args.rounds, "runs": results}


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    lines = [
        "## Finding the log end: `endOffsets` on Apache Kafka and on Tansu",
        "",
        f"Driver time per batch (commit the previous batch to Kafka and the ledger, find the "
        f"log ends, plan) at {results['partitions']} partitions over 4 topics, "
        f"{results['rounds']} batches each, one new record per partition before every batch. "
        f"Measured {results['when'][:10]} with `{results['command']}`.",
        "",
        "| broker | endOffsets | p50 (ms) | max (ms) |",
        "| --- | --- | --- | --- |",
    ]
    for r in results["runs"]:
        lines.append(f"| {r['broker']} | `{r['mode']}` | {r['p50_ms']:.0f} | {r['max_ms']:.0f} |")
    kafka = {r["mode"]: r["p50_ms"] for r in results["runs"] if r["broker"] == "kafka"}
    lines += [
        "",
        f"On Kafka `auto` (the default) trusts ListOffsets and costs what `listOffsets` does; "
        f"the confirming fetch that Tansu needs would add "
        f"{kafka['fetch'] - kafka['listOffsets']:.0f} ms per batch there. On Tansu `auto` "
        "confirms with a fetch, as it must (its ListOffsets under-reports the log end).",
    ]
    return "\n".join(lines)
