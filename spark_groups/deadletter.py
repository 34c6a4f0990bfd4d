"""Dead letters: records the user's parsing fails on go to their own table, not into an error.

Opt-in. :func:`parse` adds the parsed value and an error column to a ``kafka-group``
DataFrame; :func:`good_rows` keeps the records that parsed, :func:`dead_letters` the others
(:data:`DEAD_LETTER_COLUMNS`). A query has one sink, so the two go to two queries, each with
its own consumer group. The parser is a Python function of the value (``bytes`` or ``None``;
its exception's type and message become the error) or a Spark :class:`~pyspark.sql.Column`
that is null for bad input. Spark is imported inside the functions only. Example:
docs/reliability.md, "Dead letters".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

#: The column holding why a record could not be parsed (null for records that parsed).
ERROR_COLUMN = "dead_letter_error"
#: The columns of a dead-letter table, in order.
DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", ERROR_COLUMN)
#: Longest error text kept per record.
MAX_ERROR_CHARS = 1000


def parse(
    df: Any,
    parser: Callable[[bytes | None], Any] | Any,
    schema: Any = None,
    *,
    column: str = "parsed",
) -> Any:
    """``df`` (a ``kafka-group`` DataFrame) with ``column`` holding the parsed value (null when
    parsing failed) and :data:`ERROR_COLUMN` holding why it failed (null when it parsed).

    ``parser`` is a Spark Column (null means failure) or a Python function of the value
    (an exception means failure; ``schema``, a StructType or DDL string, is then required).
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if isinstance(parser, Column):
        return df.withColumn(column, parser).withColumn(
            ERROR_COLUMN,
            F.when(
                F.col(column).isNull(),
                F.lit(f"the parse expression gave null for this record ({parser})"),
            ),
        )
    if not callable(parser):
        raise TypeError(f"parser must be a Column or a function of the value, got {parser!r}")
    if schema is None:
        raise TypeError("a Python parser needs the schema of what it returns")
    from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_string

    parsed_type = _parse_datatype_string(schema) if isinstance(schema, str) else schema
    out_schema = StructType(
        [
            *df.schema.fields,
            StructField(column, parsed_type, True),
            StructField(ERROR_COLUMN, StringType(), True),
        ]
    )
    return df.mapInArrow(_arrow_parser(parser, parsed_type, column), out_schema)


def good_rows(parsed: Any) -> Any:
    """The records of a :func:`parse`\\ d DataFrame that parsed, without the error column."""
    from pyspark.sql import functions as F

    return parsed.where(F.col(ERROR_COLUMN).isNull()).drop(ERROR_COLUMN)


def dead_letters(parsed: Any) -> Any:
    """The records of a :func:`parse`\\ d DataFrame that did not parse:
    :data:`DEAD_LETTER_COLUMNS` (what a dead-letter table holds)."""
    from pyspark.sql import functions as F

    return parsed.where(F.col(ERROR_COLUMN).isNotNull()).select(*DEAD_LETTER_COLUMNS)


def _arrow_parser(
    parser: Callable[[bytes | None], Any], parsed_type: Any, column: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: parse each value, catching the parser's exceptions."""
    names = [f.name for f in parsed_type.fields]

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from spark_groups.spark.compat import arrow_type as arrow_type_of

        arrow_type = arrow_type_of(parsed_type)
        for batch in batches:
            values: list[Any] = []
            errors: list[str | None] = []
            for raw in batch.column("value").to_pylist():
                try:
                    values.append(_as_row(parser(raw), names))
                    errors.append(None)
                except Exception as exc:  # the user's parser failed: a dead letter
                    values.append(None)
                    errors.append(_error_text(exc))
            try:
                parsed = pa.array(values, type=arrow_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                # Some row does not fit the schema: find which, and make those dead letters.
                for i, row in enumerate(values):
                    if row is None:
                        continue
                    try:
                        pa.array([row], type=arrow_type)
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                        values[i] = None
                        errors[i] = _error_text(exc, "does not fit the schema: ")
                parsed = pa.array(values, type=arrow_type)
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, parsed, pa.array(errors, pa.string())],
                names=[*batch.schema.names, column, ERROR_COLUMN],
            )

    return run


def _as_row(result: Any, names: list[str]) -> dict[str, Any]:
    """The parser's result as a dict of the schema's fields."""
    if isinstance(result, tuple | list):
        result = dict(zip(names, result, strict=True))
    if not isinstance(result, dict):
        raise TypeError(f"the parser returned {type(result).__name__}, not a dict")
    return {name: result.get(name) for name in names}


def _error_text(exc: BaseException, prefix: str = "") -> str:
    return f"{prefix}{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
