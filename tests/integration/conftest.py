"""Real Spark (local[2]) for the integration tests: one session for the whole run.

It carries Spark's own Kafka source (``bash jars/fetch spark-kafka``) when fetched, for the
benchmark's smoke test. delta-spark is not in it: its jars need pyspark 4.2, so the delta-spark
tests run it in a process of their own (test_delta_spark.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import spark_groups
from spark_groups.tools.spark_jars import JarsMissingError, jar_conf


def _spark_kafka_conf() -> dict[str, str]:
    try:
        return jar_conf("spark-kafka")
    except JarsMissingError:
        return {}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession with the kafka-group source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-groups-tests")
        .config(map=_spark_kafka_conf())
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    spark_groups.register(session)
    yield session
    session.stop()
