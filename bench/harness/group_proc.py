"""kafka-group -> delta-group in a process of its own, as a user's job runs it.

    python bench/harness/group_proc.py SPEC_JSON

Run by :func:`bench.scenarios._latency_parts.own_process_side`: a fresh Python and JVM with
the bench's ``local[2]`` session (:func:`bench.harness.spark.spark_session`), as
``spark-submit job.py`` or ``python job.py`` starts them, nothing else in the process. SPEC:
``options`` (kafka-group's, ``offsets.table`` and ``sink.table``: the table),
``checkpoint``, ``stop_file``, ``out`` (its progress reports; ``started`` is touched
beside it once the query runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.harness.spark_delta_proc import serve


def main() -> int:
    """Run the query until ``stop_file`` exists; write its progress."""
    spec = json.loads(sys.argv[1])
    from bench.harness.spark import spark_session

    spark = spark_session()
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "99999")
    try:
        df = spark.readStream.format("kafka-group").options(**spec["options"]).load()
        writer = df.selectExpr("value", "topic", "partition", "offset").writeStream
        writer = writer.format("delta-group").trigger(processingTime="0 seconds")
        query = writer.option("checkpointLocation", spec["checkpoint"]).start()
        Path(spec["out"]).write_text(json.dumps(serve(query, spec)))
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
