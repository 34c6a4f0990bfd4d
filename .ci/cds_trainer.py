"""A short Spark session, run once with -XX:ArchiveClassesAtExit by .ci/spark-cds: the classes
it loads (the session, SQL and its code generation, a Python UDF, a Python stream data source
into Spark's parquet sink) go into the JVM's class data sharing archive the tests' drivers
start from. Any pyspark 4.x; no broker, no jars of ours."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator

from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.functions import col, udf


class _Reader(SimpleDataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"at": 0}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        at = start["at"]
        end = min(at + 10, 30)  # three batches, then nothing new
        return iter([(i, str(i)) for i in range(at, end)]), {"at": end}

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        return iter([(i, str(i)) for i in range(start["at"], end["at"])])


class _Source(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cds-trainer"

    def schema(self) -> str:
        return "id long, value string"

    def simpleStreamReader(self, schema: object) -> _Reader:
        return _Reader()


def main() -> None:
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.range(1000).groupBy((col("id") % 3).alias("k")).count().collect()
    twice = udf(lambda v: v * 2, "long")
    spark.range(10).select(twice("id")).collect()
    spark.dataSource.register(_Source)
    with tempfile.TemporaryDirectory() as folder:
        query = (
            spark.readStream.format("cds-trainer")
            .load()
            .writeStream.format("parquet")
            .option("path", f"{folder}/out")
            .option("checkpointLocation", f"{folder}/cp")
            .start()
        )
        query.processAllAvailable()
        query.stop()
        spark.read.parquet(f"{folder}/out").count()
    gateway = SparkContext._gateway
    spark.stop()
    # The JVM writes the archive as it exits, which it does once its stdin closes: wait.
    process = getattr(gateway, "proc", None)
    if process is not None:
        process.stdin.close()
        process.wait(240)


if __name__ == "__main__":
    sys.exit(main())
