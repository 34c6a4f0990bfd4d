"""kafka-group -> noop on the native read path, beside the Python one and the Python data
source ceiling: where does the faster executor read path put the whole query?

    PYTHONPATH=. python3 bench/native_read/spark_swap.py   # the extension built in place by
                                                           # pip install -e . (a C compiler)

``kafka-group-native`` is kafka-group with ``readPath=native`` (the read path required, so the
fallback is never measured by mistake), ``kafka-group`` the same with ``readPath=python``. Same
broker, session (``bench.run.spark_session``: local[2]), records and options;
Trigger.AvailableNow, warm time as in ``bench.throughput`` (the first batch's group join left
out), after two unmeasured warm-up rounds; best of the rounds, which alternate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
# The Python workers import spark_groups (and its extension) from here.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

#: The read path of each side.
READ_PATH = {"kafka-group": "python", "kafka-group-native": "native"}


def run_query(spark: Any, fmt: str, servers: str, topic: str, scratch: Path) -> dict:
    from bench.common import cpu_delta, cpu_seconds, unique
    from bench.throughput import _warm_time, source_options

    group = unique("native-swap")
    work = scratch / group
    options = source_options(servers, [topic], group, readPath=READ_PATH[fmt])
    df = spark.readStream.format("kafka-group").options(**options).load()
    before, started = cpu_seconds(), time.perf_counter()
    query = (
        df.writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(work / "checkpoint"))
        .format("noop")
        .start()
    )
    try:
        query.awaitTermination(900)
        if query.exception() is not None:
            raise RuntimeError(f"{fmt} failed: {query.exception()}")
        whole = time.perf_counter() - started
        rows, warm, _ = _warm_time(query)
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "warm": warm, "whole": whole, "cpu": cpu_delta(before, cpu_seconds())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--records", default="2000000,1000000,200000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from bench.ceiling import const_arrow_rate
    from bench.common import cpu_delta, cpu_seconds, create_topics, produce
    from bench.run import spark_session
    from spark_groups.read import native
    from spark_groups.tools.kafka_broker import KafkaBroker

    if not native.available():
        raise SystemExit(f"the native read path cannot run: {native.load_error()}")
    scratch = Path(tempfile.mkdtemp(prefix="native-swap-"))
    loads = [os.getloadavg()[0]]
    rows_out = []
    with KafkaBroker(heap="1g") as broker:
        servers = broker.bootstrap_servers
        spark = spark_session()
        (warm_topic,) = create_topics(servers, 4, prefix="swap-warm")
        produce(servers, [warm_topic], 4, 200_000, 100)
        for _ in range(2):  # JIT, Python workers, consumers: not measured
            for fmt in ("kafka-group", "kafka-group-native"):
                run_query(spark, fmt, servers, warm_topic, scratch)
            const_arrow_rate(spark, 200_000, 4, 100)
        for size, n in zip(
            map(int, args.sizes.split(",")), map(int, args.records.split(",")), strict=True
        ):
            (topic,) = create_topics(servers, 4, prefix=f"swap{size}")
            produce(servers, [topic], 4, n, size)
            best: dict[str, float] = {}
            cpu: dict[str, dict] = {}
            for round_no in range(1, args.rounds + 1):
                order = ["kafka-group", "kafka-group-native", "ceiling"]
                for fmt in order if round_no % 2 else order[::-1]:
                    if fmt == "ceiling":
                        before = cpu_seconds()
                        got, took = const_arrow_rate(spark, n, 4, size)
                        used = cpu_delta(before, cpu_seconds())
                        result = {"rows": got, "warm": took, "whole": took, "cpu": used}
                    else:
                        result = run_query(spark, fmt, servers, topic, scratch)
                        if result["rows"] != n:
                            raise SystemExit(f"{fmt} read {result['rows']} rows, expected {n}")
                    rate = result["rows"] / result["warm"]
                    if rate > best.get(fmt, 0):
                        best[fmt], cpu[fmt] = rate, result["cpu"]
                    print(
                        f"{size:>6} B round {round_no} {fmt:>18}: {rate:>10,.0f} rec/s warm, "
                        f"whole {result['whole']:.2f} s, cpu {result['cpu']}",
                        flush=True,
                    )
            loads.append(os.getloadavg()[0])
            rows_out.append((size, n, best, cpu))
        spark.stop()
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nload average (1 min) at the start and after each size: {loads}\n")
    print(
        "| value | records | kafka-group (Python read) | kafka-group, native read | "
        "native / Python | ceiling | Python / ceiling | native / ceiling | "
        "CPU s / 1M, Spark's processes: Python read, native read, ceiling |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, n, best, cpu in rows_out:
        py, nat, ceil = best["kafka-group"], best["kafka-group-native"], best["ceiling"]
        per_m = [cpu[f].get("spark", 0) / n * 1e6 for f in ("kafka-group", "kafka-group-native")]
        per_m.append((cpu["ceiling"].get("spark", 0) + cpu["ceiling"].get("bench", 0)) / n * 1e6)
        print(
            f"| {size:,} B | {n:,} | {py:,.0f} | {nat:,.0f} | {nat / py:.2f}x | {ceil:,.0f} | "
            f"{py / ceil:.2f}x | {nat / ceil:.2f}x | {' / '.join(f'{x:.2f}' for x in per_m)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
