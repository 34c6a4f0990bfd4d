"""A group member in a process of its own (own driver JVM), for the kill tests.

    python member_process.py SERVERS TOPIC GROUP SINK CHECKPOINT LEDGER

Runs a kafka-group query into a parquet (file) sink until it is killed.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # tests/: support
import spark_groups

from support.options import group_options
from support.spark import source


def main() -> None:
    servers, topic, group, sink, checkpoint, ledger = sys.argv[1:7]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-groups-member")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "768m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_groups.register(spark)
    opts = group_options(servers, topic, group, ledger, maxOffsetsPerTrigger="40")
    query = (
        source(spark, opts, checkpoint)
        .selectExpr("cast(value as string) as id", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    print("STARTED", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
