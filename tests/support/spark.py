"""Spark in the test process: whether delta-spark runs here, the marker of tests that need
Spark's AvailableNow in batches, and kafka-group streams and delta-group queries as the tests
start them."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_groups.tools.spark_jars import JarsMissingError, spark_jars


def delta_spark_here() -> bool:
    """Whether this session can carry delta-spark: its Python package is installed (it
    declares the pyspark versions it runs on) and its jars for this Spark line are fetched."""
    if importlib.util.find_spec("delta") is None:
        return False
    try:
        spark_jars("delta-spark")
    except JarsMissingError:
        return False
    return True


def _admission_control() -> bool:
    from spark_groups.spark.compat import ADMISSION_CONTROL

    return ADMISSION_CONTROL


#: For a test whose query needs several batches in one ``Trigger.AvailableNow`` run: Spark 4.0
#: and 4.1 run AvailableNow on a Python source as one batch (docs/spark-versions.md; that
#: behaviour has tests of its own: test_source.py's maxOffsetsPerTrigger test).
needs_available_now = pytest.mark.skipif(
    not _admission_control(),
    reason="Spark before 4.2 runs Trigger.AvailableNow as one batch (docs/spark-versions.md)",
)


def source(spark: Any, opts: dict, checkpoint: Path | str) -> Any:
    """A kafka-group stream of ``opts`` for the query whose checkpoint is ``checkpoint``.

    Spark before 4.2 does not tell a Python source where a restarted query stands: the source
    needs the query's ``checkpointLocation`` there (docs/spark-versions.md), as a user's
    would. On 4.2 and later it is left out, so the tests see the default behaviour."""
    from spark_groups.spark.compat import ADMISSION_CONTROL

    if not ADMISSION_CONTROL and "checkpointLocation" not in opts:
        opts = {**opts, "checkpointLocation": str(checkpoint)}
    return spark.readStream.format("kafka-group").options(**opts).load()


def ids_source(spark: Any, opts: dict, checkpoint: Path | None = None) -> Any:
    """The kafka-group source with the record's id (its value) as a long (``checkpoint``:
    the query's, which Spark before 4.2 needs; :func:`source`)."""
    if checkpoint is None:
        df = spark.readStream.format("kafka-group").options(**opts).load()
    else:
        df = source(spark, opts, checkpoint)
    return df.selectExpr(
        "cast(cast(value as string) as long) as id", "topic", "partition", "offset"
    )


def ended_with(start: Callable[[], Any], timeout_s: float = 180) -> BaseException | None:
    """Start an AvailableNow query with ``start`` and wait for its end; return the error it
    failed with (Spark raises it at start, or from the wait when the query fails), or None."""
    try:
        query = start()
        assert query.awaitTermination(timeout_s), "AvailableNow query did not end"
        return query.exception()
    except AssertionError:
        raise
    except Exception as exc:
        return exc


def run_into_sink(
    spark: Any,
    df: Any,
    table: Path | str,
    checkpoint: Path,
    group: str,
    timeout_s: float = 180,
    **options: str,
) -> BaseException | None:
    """Run one Trigger.AvailableNow query into the delta-group sink (``table``: a path or an
    object-store URI) until it ends, within ``timeout_s``; return the error it failed with
    (:func:`ended_with`), or None."""
    writer = (
        df.writeStream.format("delta-group")
        .option("group.id", group)
        .option("checkpointLocation", str(checkpoint))
        .options(**options)
        .trigger(availableNow=True)
    )
    return ended_with(lambda: writer.start(str(table)), timeout_s)
