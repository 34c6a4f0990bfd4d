"""Real Spark (local[2]) for the integration tests: one session for the whole run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import spark_groups


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession with the kafka-group source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-groups-tests")
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
