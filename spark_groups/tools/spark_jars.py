"""Spark's settings for the jars of ``bash jars/fetch NAME``: delta-spark, Spark's own Kafka
source and Hadoop's S3A file system, for the tests, the benchmarks and local runs.

    conf = {**jar_conf("spark-kafka")}                  # spark.readStream.format("kafka")
    conf = {**jar_conf("delta-spark"), **DELTA_SQL_CONF}  # spark.read.format("delta"), OPTIMIZE
    conf = {**jar_conf("hadoop-aws")}                   # s3a:// paths (checkpoints)

The jars are given to Spark with ``spark.jars`` (a comma list of files), never
``spark.jars.packages``: the poms in ``jars/`` leave out what pyspark already ships, so Spark
sees one copy of each class. delta-spark's jars need pyspark 4.2 (docs/sink.md, "delta-spark");
:func:`delta_spark_python` is the Python that has it (``bash jars/delta-spark-python``).
Nothing here imports Spark.
"""

from __future__ import annotations

import os
from pathlib import Path

from spark_groups.errors import SparkGroupsError

#: The jar sets that have a pom in ``jars/`` and are meant for Spark.
SPARK_JAR_SETS = ("delta-spark", "spark-kafka", "hadoop-aws")

#: The session settings that turn on Delta's SQL (``OPTIMIZE``, ``VACUUM``, ``DESCRIBE
#: HISTORY``, ``delta.`path``` tables) once delta-spark's jars are on the classpath.
DELTA_SQL_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

_ROOT = Path(__file__).resolve().parents[2]


class JarsMissingError(SparkGroupsError):
    """A jar set (or delta-spark's Python) is not fetched; the message says how to fetch it."""

    def __init__(self, name: str, where: Path, command: str) -> None:
        super().__init__(
            f"no {name} in {where}: fetch it with `{command}` from the project's checkout"
        )
        self.name = name
        self.where = where
        self.command = command


def jars_dir(name: str) -> Path:
    """The folder of jar set ``name``: ``$SPARK_GROUPS_JARS/<name>`` when that is set, else
    ``.cache/jars/<name>`` of the source checkout this package runs from."""
    base = os.environ.get("SPARK_GROUPS_JARS")
    return (Path(base) if base else _ROOT / ".cache" / "jars") / name


def spark_jars(name: str) -> str:
    """The ``spark.jars`` value (a comma list of files) for jar set ``name``; raises
    :class:`JarsMissingError` when it has not been fetched."""
    if name not in SPARK_JAR_SETS:
        raise ValueError(f"unknown jar set {name!r}: one of {', '.join(SPARK_JAR_SETS)}")
    folder = jars_dir(name)
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise JarsMissingError(f"{name} jars", folder, f"bash jars/fetch {name}")
    return ",".join(str(j) for j in jars)


def jar_conf(*names: str) -> dict[str, str]:
    """``{"spark.jars": ...}`` for the given jar sets."""
    return {"spark.jars": ",".join(spark_jars(n) for n in names)}


def delta_spark_python() -> Path:
    """The Python of ``bash jars/delta-spark-python`` (pyspark 4.2 and delta-spark); raises
    :class:`JarsMissingError` when it is not installed."""
    venv = _ROOT / ".cache" / "venv" / "delta-spark"
    python = venv / "bin" / "python"
    if not python.exists():
        raise JarsMissingError("delta-spark Python", venv, "bash jars/delta-spark-python")
    return python
