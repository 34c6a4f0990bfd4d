"""What the running pyspark offers a Python data source, detected once, by feature.

The adapters import the version-dependent pieces from here, and nothing else decides by
version number: admission control (:data:`ADMISSION_CONTROL`, pyspark 4.2+; without it Spark
calls ``latestOffset()`` with no arguments, never asks for a read limit or reports progress
metrics, and runs ``Trigger.AvailableNow`` as one batch), the Arrow stream writer
(:data:`ARROW_STREAM_WRITER`, 4.1+; before, the sink's tasks get rows), and Arrow types in UTC
on every version (:func:`arrow_schema`, :func:`arrow_type`). pyspark before 4.0 has no Python
data source API and is refused at import (:class:`UnsupportedSparkError`).
docs/spark-versions.md.
"""

from __future__ import annotations

import inspect
from typing import Any

from spark_groups.errors import UnsupportedSparkError

#: The Spark (pyspark) release lines this package runs on, oldest first.
SUPPORTED = ("4.0", "4.1", "4.2", "4.3")

try:
    import pyspark
except ImportError as _missing:
    raise UnsupportedSparkError(None, SUPPORTED) from _missing


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


#: The running pyspark's version string, and its (major, minor).
SPARK_VERSION: str = pyspark.__version__
SPARK_MINOR: tuple[int, int] = _version(SPARK_VERSION)

if SPARK_MINOR < (4, 0):
    raise UnsupportedSparkError(SPARK_VERSION, SUPPORTED)

from pyspark.sql import datasource as _datasource  # noqa: E402
from pyspark.sql.pandas import types as _pandas_types  # noqa: E402

_types: Any = _pandas_types  # signatures differ by version: checked below

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    #: Spark passes ``latestOffset(start, limit)`` and honours ``getDefaultReadLimit``,
    #: ``reportLatestOffset`` and ``prepareForTriggerAvailableNow`` (pyspark 4.2+).
    ADMISSION_CONTROL = True
except ImportError:  # pyspark 4.0 and 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stands in for pyspark's ``ReadLimit``; Spark never passes one here."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stands in for pyspark's ``ReadAllAvailable``."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stands in for pyspark's ``ReadMaxRows``."""

        def __init__(self, max_rows: int) -> None:
            self.max_rows = max_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stands in for pyspark's mixin; Spark of this version never calls it."""


#: Tasks of a Python stream writer receive Arrow batches (pyspark 4.1+), not rows.
ARROW_STREAM_WRITER: bool = hasattr(_datasource, "DataSourceStreamArrowWriter")

_SCHEMA_TIMEZONE = "timezone" in inspect.signature(_types.to_arrow_schema).parameters
_TYPE_TIMEZONE = "timezone" in inspect.signature(_types.to_arrow_type).parameters


def arrow_schema(schema: Any) -> Any:
    """The Arrow schema of a Spark ``StructType``, timestamps in UTC, on every version."""
    if _SCHEMA_TIMEZONE:
        return _types.to_arrow_schema(schema, timezone="UTC")
    return _types.to_arrow_schema(schema, timestamp_utc=True)


def arrow_type(data_type: Any) -> Any:
    """The Arrow type of a Spark ``DataType``, timestamps in UTC, on every version (pyspark
    4.2+ asserts on a timestamp given no ``timezone``)."""
    if _TYPE_TIMEZONE:
        return _types.to_arrow_type(data_type, timezone="UTC")
    return _types.to_arrow_type(data_type, timestamp_utc=True)


__all__ = [
    "ADMISSION_CONTROL",
    "ARROW_STREAM_WRITER",
    "SPARK_MINOR",
    "SPARK_VERSION",
    "SUPPORTED",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "arrow_schema",
    "arrow_type",
]
