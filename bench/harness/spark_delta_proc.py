"""Spark's own Delta sink, measured in a process of its own (pyspark 4.2 with delta-spark).

    .cache/venv/spark-4.2/bin/python bench/harness/spark_delta_proc.py SPEC_JSON  # jars/spark-venv

Run by :func:`bench.harness.spark.spark_delta_sink` (delta-spark does not run on pyspark 4.3):
``format("kafka")`` from offset 0 into ``noop``, then into ``format("delta")``. Imports only
pyspark. SPEC: ``conf``, ``options`` (kafka's), ``warmup`` (or null), ``rounds``, ``work``, ``out``.
With ``stream`` (a table path) instead: kafka -> delta there with trigger 0 s, from when it
touches ``started`` beside ``out`` until ``stop_file`` exists; ``out`` gets its progress.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def _run(spark: Any, options: dict, work: Path, sink: str) -> dict:
    work = work / sink
    df = spark.readStream.format("kafka").options(**options).load()
    writer = df.writeStream.trigger(availableNow=True).format(sink)
    writer = writer.option("checkpointLocation", str(work / "checkpoint"))
    query = writer.start(str(work / "table") if sink == "delta" else None)
    query.awaitTermination(900)
    if query.isActive or query.exception() is not None:
        raise RuntimeError(f"the {sink} query did not end well: {query.exception()}")
    progress = [p for p in query.recentProgress if p is not None]
    rows = sum(int(p.numInputRows) for p in progress)
    ms = sum(int(p.durationMs.get("triggerExecution", 0)) for p in progress)
    result = {"rows": rows, "seconds": ms / 1000.0}
    if sink == "delta":
        result["written"] = spark.read.format("delta").load(str(work / "table")).count()
    return result


def serve(query: Any, spec: dict) -> list:
    """Touch ``started`` beside ``spec["out"]``, run ``query`` until ``spec["stop_file"]``
    exists, stop it; its progress reports (raises when it failed)."""
    (Path(spec["out"]).parent / "started").touch()
    while not Path(spec["stop_file"]).exists() and query.isActive:
        time.sleep(0.2)
    query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    return [json.loads(p.json) for p in query.recentProgress]


def _stream(spark: Any, spec: dict) -> list:
    table = Path(spec["stream"])
    df = spark.readStream.format("kafka").options(**spec["options"]).load()
    writer = df.selectExpr("value", "topic", "partition", "offset").writeStream.format("delta")
    writer = writer.option("checkpointLocation", str(table.parent / "checkpoint"))
    return serve(writer.trigger(processingTime="0 seconds").start(str(table)), spec)


def main() -> int:
    spec = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("spark-groups-bench-delta")
    spark = builder.config(map=spec["conf"]).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if spec.get("stream"):
            Path(spec["out"]).write_text(json.dumps(_stream(spark, spec)))
            return 0
        if spec.get("warmup"):
            for sink in ("noop", "delta"):
                _run(spark, spec["warmup"], Path(spec["work"] + "-w"), sink)
        # Best of the rounds per sink (as the kafka-group runs beside it), fresh work each.
        out: dict[str, dict] = {}
        for round_ in range(int(spec.get("rounds", 1))):
            for sink in ("noop", "delta"):
                run = _run(spark, spec["options"], Path(f"{spec['work']}-{round_}"), sink)
                if sink not in out or run["seconds"] < out[sink]["seconds"]:
                    out[sink] = run
        Path(spec["out"]).write_text(json.dumps(out))
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
