"""Real Spark (local[2]) for the integration tests: one session for the whole run.

It carries Spark's own Kafka source (``bash jars/fetch spark-kafka``), for the parity tests
and the benchmark's smoke test, and Hadoop's S3A (``bash jars/fetch hadoop-aws``), for
checkpoints on ``s3a://`` (the ``s3a_bucket`` fixture), each when fetched, for the running
pyspark's line where the pom has one (``spark_groups.tools.spark_jars.jars_dir``).

Where delta-spark runs (Spark 4.0 to 4.2, with its Python package installed: the lanes of
``.ci/run``, ``bash jars/spark-venv``) the session carries it too, with Delta's SQL extension
and catalog, as a user's session would: the delta-spark tests use it in this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import spark_groups
from spark_groups.tools.s3_server import S3Server
from spark_groups.tools.spark_jars import DELTA_SQL_CONF, JarsMissingError, spark_jars

from support.spark import delta_spark_here

#: The jar sets the session carries when they are fetched.
SESSION_JARS = ("spark-kafka", "hadoop-aws")


def _fetched_jars_conf() -> dict[str, str]:
    fetched = []
    for name in SESSION_JARS:
        try:
            fetched.append(spark_jars(name))
        except JarsMissingError:
            continue
    conf = {"spark.jars": ",".join(fetched)} if fetched else {}
    if delta_spark_here():
        conf = {"spark.jars": ",".join([*fetched, spark_jars("delta-spark")]), **DELTA_SQL_CONF}
    return conf


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession with the kafka-group source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-groups-tests")
        .config(map=_fetched_jars_conf())
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


@pytest.fixture
def s3a_bucket(spark: Any, s3_server: S3Server, s3_bucket: str) -> Iterator[str]:
    """A fresh bucket that both the session's Spark (Hadoop's S3A, ``s3a://NAME/...``) and
    delta-rs / pyarrow (``s3://NAME/...``, :meth:`S3Server.storage_options`) reach: its name.
    The S3A settings are the bucket's own (``fs.s3a.bucket.NAME.*``), removed afterwards."""
    spark_jars("hadoop-aws")  # fetched, or an error saying how to fetch it
    name = s3_bucket.removeprefix("s3://")
    settings = s3_server.hadoop_conf(name)
    for key, value in settings.items():
        spark.conf.set(key, value)
    yield name
    for key in settings:
        spark.conf.unset(key)


@pytest.fixture(scope="session")
def registry() -> Iterator[Any]:
    """One schema registry for the run (Apicurio Registry, its Confluent API:
    ``tests/support/registry.py``), started by the first test that asks for it."""
    from support.registry import Registry

    with Registry() as started:
        yield started
