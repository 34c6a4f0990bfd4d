"""Arrow types as Spark DDL, for a source's ``schema()`` (the types :mod:`avro_types` makes)."""

from __future__ import annotations

import pyarrow as pa

_SIMPLE = {
    pa.null(): "void",
    pa.bool_(): "boolean",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.date32(): "date",
}


def ddl_type(arrow: pa.DataType) -> str:
    """The Spark DDL of ``arrow``; ``TypeError`` for a type Spark has no match for."""
    if arrow in _SIMPLE:
        return _SIMPLE[arrow]
    if pa.types.is_timestamp(arrow):
        return "timestamp" if arrow.tz is not None else "timestamp_ntz"
    if arrow == pa.duration("us"):
        return "interval day to second"
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    if pa.types.is_map(arrow):
        return f"map<{ddl_type(arrow.key_type)},{ddl_type(arrow.item_type)}>"
    if pa.types.is_list(arrow):
        return f"array<{ddl_type(arrow.value_type)}>"
    if pa.types.is_struct(arrow):
        inner = ",".join(f"{quote(f.name)}:{ddl_type(f.type)}" for f in arrow)
        return f"struct<{inner}>"
    raise TypeError(f"no Spark type for the Arrow type {arrow}")


def ddl(schema: pa.Schema) -> str:
    """The Spark DDL of a row schema: ``name type, ...``."""
    return ", ".join(f"{quote(f.name)} {ddl_type(f.type)}" for f in schema)


def quote(name: str) -> str:
    """A column or field name quoted for DDL."""
    return "`" + name.replace("`", "``") + "`"
