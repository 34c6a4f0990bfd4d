"""Driver time per batch by ``endOffsets`` mode, on Apache Kafka and on Tansu, side by side.

    PYTHONPATH=. python -m bench.end_offsets [--partitions 1000] [--rounds 10]

Starts both brokers itself (Kafka from ``bash jars/fetch kafka``), creates the same topics on
each (``--partitions`` in all, over 4 topics), and runs the driver-side planner
(:mod:`bench.planner_proc`: a ``GroupStream`` with its ledger, driven as Spark drives it, one
new record in every partition before each batch) once per mode. The table it prints also
replaces the section between the ``end-offsets`` markers of ``docs/benchmarks.md``, which
``bench.run`` keeps when it rewrites the rest of that page.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.common import create_topics, produce
from bench.scale import planner
from spark_groups.embedded import EmbeddedBroker
from spark_groups.tools.kafka_broker import KafkaBroker

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- end-offsets:start -->", "<!-- end-offsets:end -->"
#: (broker, mode) pairs worth measuring: listOffsets is wrong on Tansu, so it is left out.
RUNS = [("kafka", "listOffsets"), ("kafka", "fetch"), ("kafka", "auto"),
        ("tansu", "fetch"), ("tansu", "auto")]  # fmt: skip


def measure(partitions: int, rounds: int, topics: int = 4) -> list[dict]:
    """Planner results for every (broker, mode) in :data:`RUNS`."""
    per_topic = partitions // topics
    results = []
    with KafkaBroker() as kafka, EmbeddedBroker() as tansu, tempfile.TemporaryDirectory() as d:
        servers = {"kafka": kafka.bootstrap_servers, "tansu": tansu.bootstrap_servers}
        names = {}
        for broker, where in servers.items():
            names[broker] = create_topics(where, per_topic, topics, prefix="ends")
            produce(where, names[broker], per_topic, per_topic * topics, 100)
        for broker, mode in RUNS:
            res = planner(
                "stream", servers[broker], names[broker], per_topic, rounds, Path(d),
                end_offsets=mode,
            )  # fmt: skip
            times = sorted(res["batch_s"])
            results.append(
                {
                    "broker": broker,
                    "mode": mode,
                    "p50_ms": times[len(times) // 2] * 1000,
                    "max_ms": times[-1] * 1000,
                    "owned": res["owned"],
                }
            )
            print(results[-1], flush=True)
    return results


def section(results: list[dict], partitions: int, rounds: int) -> str:
    """The markdown section for docs/benchmarks.md."""
    lines = [
        START,
        "## Finding the log end: `endOffsets` on Apache Kafka and on Tansu",
        "",
        f"Driver time per batch (commit the previous batch to Kafka and the ledger, find the "
        f"log ends, plan) at {partitions} partitions over 4 topics, {rounds} batches each, "
        f"one new record per partition before every batch. Measured "
        f"{datetime.now(UTC):%Y-%m-%d} with `PYTHONPATH=. python -m bench.end_offsets`.",
        "",
        "| broker | endOffsets | p50 (ms) | max (ms) |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(f"| {r['broker']} | `{r['mode']}` | {r['p50_ms']:.0f} | {r['max_ms']:.0f} |")
    kafka = {r["mode"]: r["p50_ms"] for r in results if r["broker"] == "kafka"}
    lines += [
        "",
        f"On Kafka `auto` (the default) trusts ListOffsets and costs what `listOffsets` does; "
        f"the confirming fetch that Tansu needs would add "
        f"{kafka['fetch'] - kafka['listOffsets']:.0f} ms per batch there. On Tansu `auto` "
        "confirms with a fetch, as it must (its ListOffsets under-reports the log end).",
        END,
    ]
    return "\n".join(lines)


def replace_section(page: Path, text: str, markers: tuple[str, str] = (START, END)) -> None:
    """Put ``text`` between the ``markers`` of ``page`` (appended when they are missing)."""
    start, end = markers
    old = page.read_text() if page.exists() else ""
    if start in old and end in old:
        before, rest = old.split(start, 1)
        after = rest.split(end, 1)[1]
        page.write_text(before + text + after)
    else:
        page.write_text(old.rstrip("\n") + "\n\n" + text + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    results = measure(args.partitions, args.rounds)
    text = section(results, args.partitions, args.rounds)
    print(text)
    replace_section(Path(args.out), text)


if __name__ == "__main__":
    main()
