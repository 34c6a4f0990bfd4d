"""delta-spark on our tables, as a separate process with pyspark 4.2 (its own venv).

    <.cache/venv/delta-spark>/bin/python delta_spark_process.py SPEC_JSON

Run by tests/integration/test_delta_spark.py. delta-spark's jars do not run on pyspark 4.3
(docs/sink.md, "delta-spark"), so this process is what a user's Spark-with-Delta job is: it
imports only pyspark and delta (not spark_groups) and writes its findings as JSON to
``spec["out"]``. SPEC: ``conf`` (spark.jars and Delta's SQL settings), ``mode`` and the
mode's fields:

* ``read``: ``tables`` {name: path}; per table the rows (``spark.read.format("delta")``),
  ``DeltaTable.forPath(...).history()`` and the transaction ids of its newest snapshot.
* ``maintain``: ``table``, ``stop_file``; until the stop file exists, over and over:
  ``OPTIMIZE``, an append by this other writer (rows with negative ids), ``VACUUM`` (default
  retention), each only while the stop file is absent; every operation's outcome (or error)
  as one JSON line in ``<out>.ops``.
* ``create``: ``table``, ``ddl`` (the columns), ``properties``: ``CREATE TABLE`` with
  delta-spark's defaults plus those properties; its protocol and features.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def session(conf: dict[str, str]) -> Any:
    """A local Spark with delta-spark: ``conf`` holds spark.jars and Delta's SQL settings."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("delta-spark-side")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def transactions(spark: Any, path: str) -> dict[str, int]:
    """{app id: version} of the table's newest snapshot, as delta-spark sees them."""
    jvm = spark._jvm
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, path)
    txns = jvm.scala.jdk.javaapi.CollectionConverters.asJava(pair._2().setTransactions())
    return {t.appId(): int(t.version()) for t in txns}


def read(spark: Any, spec: dict) -> dict:
    from delta.tables import DeltaTable

    out = {}
    for name, path in spec["tables"].items():
        df = spark.read.format("delta").load(path)
        history = DeltaTable.forPath(spark, path).history().orderBy("version")
        out[name] = {
            "columns": df.columns,
            "rows": [r.asDict(recursive=True) for r in df.collect()],
            "history": [
                {
                    "version": r["version"],
                    "operation": r["operation"],
                    "engineInfo": r["engineInfo"],
                    "userMetadata": r["userMetadata"],
                    "operationParameters": dict(r["operationParameters"] or {}),
                }
                for r in history.collect()
            ],
            "transactions": transactions(spark, path),
        }
    return out


def maintain(spark: Any, spec: dict) -> dict:
    table, stop_file, out = spec["table"], Path(spec["stop_file"]), Path(spec["out"] + ".ops")
    appended = 0
    rounds = 0

    def op(name: str, fn: Any) -> None:
        started = time.time()
        try:
            detail = fn()
            line = {"op": name, "ok": True, "detail": detail}
        except Exception as exc:  # every outcome is data for the test
            line = {"op": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        line["seconds"] = round(time.time() - started, 2)
        with out.open("a") as f:
            f.write(json.dumps(line, default=str) + "\n")

    def append() -> int:
        nonlocal appended
        ids = list(range(-(appended + 10), -appended))
        rows = [(i, "external", None, None) for i in ids]
        schema = "id long, topic string, partition int, offset long"
        spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(table)
        appended += len(ids)
        return len(ids)

    def optimize() -> dict:
        metrics = spark.sql(f"OPTIMIZE delta.`{table}`").collect()[0]["metrics"]
        return {"added": metrics["numFilesAdded"], "removed": metrics["numFilesRemoved"]}

    def vacuum() -> int:
        return len(spark.sql(f"VACUUM delta.`{table}`").collect())

    while not stop_file.exists():
        rounds += 1
        for name, fn in (("optimize", optimize), ("append", append), ("vacuum", vacuum)):
            if stop_file.exists():
                break
            op(name, fn)
    return {"rounds": rounds, "appended": appended}


def create(spark: Any, spec: dict) -> dict:
    props = ", ".join(f"'{k}' = '{v}'" for k, v in spec.get("properties", {}).items())
    spark.sql(
        f"CREATE TABLE delta.`{spec['table']}` ({spec['ddl']}) USING delta"
        + (f" TBLPROPERTIES ({props})" if props else "")
    )
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{spec['table']}`").collect()[0].asDict()
    return {
        "minReaderVersion": detail["minReaderVersion"],
        "minWriterVersion": detail["minWriterVersion"],
        "tableFeatures": sorted(detail.get("tableFeatures") or []),
        "properties": dict(detail["properties"] or {}),
    }


def main() -> int:
    spec = json.loads(sys.argv[1])
    spark = session(spec["conf"])
    try:
        result = {"read": read, "maintain": maintain, "create": create}[spec["mode"]](spark, spec)
        Path(spec["out"]).write_text(json.dumps({"ok": True, **result}, default=str))
        return 0
    except Exception as exc:
        Path(spec["out"]).write_text(
            json.dumps({"ok": False, "error": f"{exc}", "trace": traceback.format_exc()})
        )
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
