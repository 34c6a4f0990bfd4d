"""Spark's settings for the jars of ``bash jars/fetch NAME``, for tests, benchmarks, local runs.

    conf = {**jar_conf("spark-kafka")}                  # spark.readStream.format("kafka")
    conf = {**jar_conf("delta-spark"), **DELTA_SQL_CONF}  # spark.read.format("delta"), OPTIMIZE
    conf = {**jar_conf("hadoop-aws")}                   # s3a:// paths (checkpoints)

Jars go to Spark with ``spark.jars``, never ``spark.jars.packages``: the poms in ``jars/``
leave out what pyspark ships, so Spark sees one copy of each class. delta-spark's jars are
fetched per Spark line, and :func:`jars_dir` picks the running pyspark's. No Spark import.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from spark_groups.errors import SparkGroupsError
from spark_groups.tools.checkout import checkout_root, jars_root

#: The jar sets that have a pom in ``jars/`` and are meant for Spark.
SPARK_JAR_SETS = ("delta-spark", "spark-kafka", "hadoop-aws")

#: The session settings that turn on Delta's SQL (``OPTIMIZE``, ``VACUUM``, ``DESCRIBE
#: HISTORY``, ``delta.`path``` tables) once delta-spark's jars are on the classpath.
DELTA_SQL_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


class JarsMissingError(SparkGroupsError):
    """A jar set (or delta-spark's Python) is not fetched; the message says how to fetch it."""

    def __init__(self, name: str, where: Path, command: str) -> None:
        super().__init__(
            f"no {name} in {where}: fetch it with `{command}` from the project's checkout"
        )
        self.name = name
        self.where = where
        self.command = command


def spark_line() -> str | None:
    """The running pyspark's release line (``"4.2"``), read from its package metadata (no
    Spark import); None where pyspark is not an installed distribution."""
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None
    return ".".join(version.split(".")[:2])


def jars_dir(name: str, line: str | None = None) -> Path:
    """The folder of jar set ``name`` under :func:`~spark_groups.tools.checkout.jars_root`
    (``$SPARK_GROUPS_JARS`` or the checkout's ``.cache/jars``): ``<name>@<line>`` for the
    Spark line ``line`` (default: the running pyspark's) when fetched (``bash jars/fetch
    <name>@4.1``), else ``<name>``."""
    root = jars_root()
    line = line or spark_line()
    if line is not None and (root / f"{name}@{line}").is_dir():
        return root / f"{name}@{line}"
    return root / name


def spark_jars(name: str, line: str | None = None) -> str:
    """The ``spark.jars`` value (a comma list of files) for jar set ``name`` (for Spark line
    ``line``, default the running one); raises :class:`JarsMissingError` when it has not been
    fetched."""
    if name not in SPARK_JAR_SETS:
        raise ValueError(f"unknown jar set {name!r}: one of {', '.join(SPARK_JAR_SETS)}")
    folder = jars_dir(name, line)
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise JarsMissingError(f"{name} jars", folder, f"bash jars/fetch {folder.name}")
    return ",".join(str(j) for j in jars)


def jar_conf(*names: str, line: str | None = None) -> dict[str, str]:
    """``{"spark.jars": ...}`` for the given jar sets (for Spark line ``line``)."""
    return {"spark.jars": ",".join(spark_jars(n, line) for n in names)}


def delta_spark_python() -> Path:
    """The Python of ``bash jars/spark-venv 4.2.0`` (pyspark 4.2 and delta-spark, for a Delta
    application beside pyspark 4.3); raises :class:`JarsMissingError` when it is not there."""
    venv = checkout_root() / ".cache" / "venv" / "spark-4.2"
    python = venv / "bin" / "python"
    if not python.exists():
        raise JarsMissingError("delta-spark Python", venv, "bash jars/spark-venv 4.2.0")
    return python
