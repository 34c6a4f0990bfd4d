"""An Avro schema as an Arrow type, mapped as Spark's ``from_avro`` maps it to Spark types.

=========================================  ===============================================
Avro                                       Arrow (Spark)
=========================================  ===============================================
boolean, int, long, float, double          bool, int32, int64, float32, float64
string (uuid too), enum                    string
bytes, fixed                               binary
bytes/fixed + decimal(p, s)                decimal128(p, s)
int + date                                 date32 (date)
long + timestamp-millis/-micros            timestamp us UTC (timestamp)
long + local-timestamp-millis/-micros      timestamp us (timestamp_ntz)
int + time-millis, long + time-micros      int32, int64 (Spark has no time-of-day type)
record                                     struct
array, map                                 list, map<string, _>
union [null, T]                            T (nullable)
union [int, long] / [float, double]        int64 / float64
union of other types                       struct<member0, member1, ...> (one set)
=========================================  ===============================================

:func:`avro_shape` also gives the schema fastavro decodes with (the time logical types left
out: their raw numbers go into Arrow at once and are cast there), the Arrow type those values
fill and the function that shapes a decoded value where a union needs it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

#: Logical types decoded as their raw number, and the Arrow type that number fills.
_RAW_LOGICAL = {
    "date": pa.date32(),
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
    "time-millis": pa.int32(),
    "time-micros": pa.int64(),
    "uuid": pa.string(),
}
_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}

Shape = Callable[[Any], Any]


class AvroSchemaError(ValueError):
    """The schema cannot be a Spark type (a recursive record), or is not valid Avro."""


@dataclass(frozen=True)
class AvroShape:
    """What decoding to one reader schema needs: ``schema`` (parsed, for fastavro, without
    the time logical types), ``raw`` (the Arrow type its decoded values fill), ``arrow``
    (the column's type, ``raw`` cast), ``shape`` (None, or the function that shapes a
    decoded value for ``raw``: unions of several types)."""

    schema: Any
    raw: pa.DataType
    arrow: pa.DataType
    shape: Shape | None


def parse(text: str, references: tuple[tuple[str, str], ...] = ()) -> Any:
    """A registry schema text (and its references' texts) parsed by fastavro, the time
    logical types left out; :class:`AvroSchemaError` when it is not valid Avro."""
    import fastavro

    named: dict[str, Any] = {}
    try:
        for _, ref_text in references:
            fastavro.parse_schema(_without_time_types(json.loads(ref_text)), named_schemas=named)
        return fastavro.parse_schema(_without_time_types(json.loads(text)), named_schemas=named)
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise AvroSchemaError(f"not a valid Avro schema: {exc}") from None


def avro_shape(text: str, references: tuple[tuple[str, str], ...] = ()) -> AvroShape:
    """The :class:`AvroShape` of the schema ``text`` (its references' texts by name)."""
    import fastavro

    named: dict[str, Any] = {}
    for _, ref_text in references:
        fastavro.parse_schema(json.loads(ref_text), named_schemas=named, _write_hint=False)
    try:
        full = fastavro.parse_schema(json.loads(text), named_schemas=named, _write_hint=False)
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise AvroSchemaError(f"not a valid Avro schema: {exc}") from None
    mapper = _Mapper(named)
    raw, arrow, shape = mapper.map(full)
    return AvroShape(parse(text, references), raw, arrow, shape)


class _Mapper:
    """Avro (parsed, names full) to (raw Arrow type, Arrow type, shape function or None)."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.stack: list[str] = []

    def map(self, schema: Any) -> tuple[pa.DataType, pa.DataType, Shape | None]:
        if isinstance(schema, list):
            return self._union(schema)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], _PRIMITIVES[schema], None
            if schema not in self.named:
                raise AvroSchemaError(f"unknown Avro type name {schema!r}")
            return self.map(self.named[schema])
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            decimal = pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
            return decimal, decimal, None
        if logical in _RAW_LOGICAL and kind in ("int", "long", "string"):
            raw = _RAW_LOGICAL[logical]
            return raw, _spark_time(raw), None
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind], _PRIMITIVES[kind], None
        if kind == "enum":
            return pa.string(), pa.string(), None
        if kind == "fixed":
            return pa.binary(), pa.binary(), None
        if kind == "array":
            raw, arrow, item_shape = self.map(schema["items"])
            shape = None if item_shape is None else _each(item_shape)
            return pa.list_(raw), pa.list_(arrow), shape
        if kind == "map":
            raw, arrow, value_shape = self.map(schema["values"])
            shape = None if value_shape is None else _each_value(value_shape)
            return pa.map_(pa.string(), raw), pa.map_(pa.string(), arrow), shape
        if kind in ("record", "error"):
            return self._record(schema)
        if isinstance(kind, dict | list):
            return self.map(kind)
        if isinstance(kind, str) and kind in self.named:
            return self.map(self.named[kind])
        raise AvroSchemaError(f"unknown Avro type {kind!r}")

    def _record(self, schema: Mapping[str, Any]) -> tuple[pa.DataType, pa.DataType, Shape | None]:
        name = schema.get("name", "")
        if name in self.stack:
            raise AvroSchemaError(
                f"the record {name} contains itself ({' -> '.join([*self.stack, name])}): a "
                "recursive schema has no Spark type"
            )
        self.stack.append(name)
        raws, arrows, shapes = [], [], {}
        for f in schema["fields"]:
            raw, arrow, shape = self.map(f["type"])
            raws.append(pa.field(f["name"], raw))
            arrows.append(pa.field(f["name"], arrow))
            if shape is not None:
                shapes[f["name"]] = shape
        self.stack.pop()
        return pa.struct(raws), pa.struct(arrows), (_fields(shapes) if shapes else None)

    def _union(self, branches: list[Any]) -> tuple[pa.DataType, pa.DataType, Shape | None]:
        others = [b for b in branches if b != "null"]
        if not others:
            return pa.null(), pa.null(), None
        if len(others) == 1:
            return self.map(others[0])
        kinds = {_kind(b, self.named) for b in others}
        if kinds == {"int", "long"}:
            return pa.int64(), pa.int64(), None
        if kinds == {"float", "double"}:
            return pa.float64(), pa.float64(), None
        mapped = [self.map(b) for b in others]
        raw = pa.struct([pa.field(f"member{i}", m[0]) for i, m in enumerate(mapped)])
        arrow = pa.struct([pa.field(f"member{i}", m[1]) for i, m in enumerate(mapped)])
        tests = [_branch_test(b, self.named) for b in others]
        return raw, arrow, _members(tests, [m[2] for m in mapped])


def _spark_time(raw: pa.DataType) -> pa.DataType:
    """Spark's type of a time logical type's raw Arrow type (timestamps in microseconds)."""
    if pa.types.is_timestamp(raw):
        return pa.timestamp("us", tz=raw.tz)
    return raw


def _kind(schema: Any, named: Mapping[str, Any]) -> str:
    """An Avro type's kind: a primitive's name, or record, enum, fixed, array, map."""
    if isinstance(schema, str):
        return _kind(named[schema], named) if schema in named else schema
    kind = schema["type"]
    return _kind(kind, named) if isinstance(kind, dict | list) else str(kind)


def _branch_test(schema: Any, named: Mapping[str, Any]) -> Callable[[Any], bool]:
    """Whether a decoded value came from the union branch ``schema`` (fastavro returns
    ``(name, value)`` for a record of a union of several records)."""
    kind = _kind(schema, named)
    if kind in ("record", "error"):
        name = schema if isinstance(schema, str) else schema.get("name")
        return lambda v: isinstance(v, dict) or (isinstance(v, tuple) and v[0] == name)
    if isinstance(schema, dict) and schema.get("logicalType") == "decimal":
        from decimal import Decimal

        return lambda v: isinstance(v, Decimal)
    types: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes),
        "array": lambda v: isinstance(v, list),
        "map": lambda v: isinstance(v, dict),
    }
    return types[kind]


def _members(tests: list[Callable[[Any], bool]], shapes: list[Shape | None]) -> Shape:
    names = [f"member{i}" for i in range(len(tests))]

    def shape(value: Any) -> Any:
        if value is None:
            return None
        for name, test, inner in zip(names, tests, shapes, strict=True):
            if test(value):
                if isinstance(value, tuple):
                    value = value[1]
                return {name: inner(value) if inner is not None else value}
        raise ValueError(f"a union value of type {type(value).__name__} matches no branch")

    return shape


def _fields(shapes: Mapping[str, Shape]) -> Shape:
    def shape(record: Any) -> Any:
        if record is None:
            return None
        if isinstance(record, tuple):
            record = record[1]
        for name, inner in shapes.items():
            record[name] = inner(record.get(name))
        return record

    return shape


def _each(inner: Shape) -> Shape:
    return lambda items: None if items is None else [inner(i) for i in items]


def _each_value(inner: Shape) -> Shape:
    return lambda entries: None if entries is None else {k: inner(v) for k, v in entries.items()}


def _without_time_types(schema: Any) -> Any:
    """A copy of a schema's JSON without the logical types of :data:`_RAW_LOGICAL`."""
    schema = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for each in node:
                visit(each)
        elif isinstance(node, dict):
            if node.get("logicalType") in _RAW_LOGICAL:
                del node["logicalType"]
            for key in ("type", "items", "values"):
                if key in node:
                    visit(node[key])
            for f in node.get("fields", ()):
                visit(f)

    visit(schema)
    return schema
