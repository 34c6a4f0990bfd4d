"""A JSON Schema as an Arrow type: the column a ``json-schema-confluent`` value fills.

=============================================  ==========================================
JSON Schema                                    Arrow (Spark)
=============================================  ==========================================
``object`` with ``properties``                 struct, the properties in their order
``string`` (any ``format``), string ``enum``   string
``integer``, ``number``, ``boolean``           int64, float64, bool
``array`` with ``items``                       list
``["T", "null"]``, ``oneOf``/``anyOf`` of      T (nullable)
``{"type": "null"}`` and T
``$ref`` to ``#/definitions/...``, ``$defs``   the type referred to
anything else (no type, several types, an      string: the value's JSON text
``object`` without ``properties``)
=============================================  ==========================================
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

_SIMPLE = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
           "boolean": pa.bool_(), "null": pa.null()}  # fmt: skip

Shape = Callable[[Any], Any]


class JsonSchemaError(ValueError):
    """The schema is not valid JSON, refers to what it does not define, or contains itself."""


@dataclass(frozen=True)
class JsonShape:
    """A JSON Schema's column: its Arrow type, and the function that shapes a parsed value
    for it (the values kept as JSON text), or None."""

    arrow: pa.DataType
    shape: Shape | None


def json_shape(text: str) -> JsonShape:
    """The :class:`JsonShape` of the schema ``text``."""
    try:
        root = json.loads(text)
    except ValueError as exc:
        raise JsonSchemaError(f"not valid JSON: {exc}") from None
    arrow, shape = _Mapper(root).map(root)
    return JsonShape(arrow, shape)


class _Mapper:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.stack: list[str] = []

    def map(self, schema: Any) -> tuple[pa.DataType, Shape | None]:
        if not isinstance(schema, Mapping):
            return pa.string(), _as_text
        if "$ref" in schema:
            return self._ref(str(schema["$ref"]))
        for key in ("oneOf", "anyOf"):
            if key in schema:
                others = [s for s in schema[key] if not _is_null(s)]
                return self.map(others[0]) if len(others) == 1 else (pa.string(), _as_text)
        kind = schema.get("type")
        if isinstance(kind, list):
            others = [k for k in kind if k != "null"]
            if len(others) != 1:
                return pa.string(), _as_text
            kind = others[0]
        if kind == "object" and isinstance(schema.get("properties"), Mapping):
            fields, shapes = [], {}
            for name, sub in schema["properties"].items():
                arrow, shape = self.map(sub)
                fields.append(pa.field(name, arrow))
                if shape is not None:
                    shapes[name] = shape
            return pa.struct(fields), (_fields(shapes) if shapes else None)
        if kind == "array" and isinstance(schema.get("items"), Mapping):
            arrow, shape = self.map(schema["items"])
            return pa.list_(arrow), (None if shape is None else _each(shape))
        if kind in _SIMPLE:
            return _SIMPLE[kind], None
        if kind is None and "enum" in schema and all(isinstance(e, str) for e in schema["enum"]):
            return pa.string(), None
        return pa.string(), _as_text

    def _ref(self, ref: str) -> tuple[pa.DataType, Shape | None]:
        if not ref.startswith("#/"):
            raise JsonSchemaError(f"refers to {ref!r}: only references inside the schema are read")
        if ref in self.stack:
            raise JsonSchemaError(
                f"{ref} contains itself ({' -> '.join([*self.stack, ref])}): a recursive schema "
                "has no Spark type"
            )
        node: Any = self.root
        for part in ref[2:].split("/"):
            if not isinstance(node, Mapping) or part not in node:
                raise JsonSchemaError(f"refers to {ref!r}, which it does not define")
            node = node[part]
        self.stack.append(ref)
        try:
            return self.map(node)
        finally:
            self.stack.pop()


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null"


def _as_text(value: Any) -> Any:
    """A value of a schema with no Arrow type of its own: its JSON text (strings as they are)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _fields(shapes: Mapping[str, Shape]) -> Shape:
    def shape(record: Any) -> Any:
        if not isinstance(record, dict):
            return record  # not an object: Arrow refuses it, the record is bad
        for name, inner in shapes.items():
            if name in record:
                record[name] = inner(record[name])
        return record

    return shape


def _each(inner: Shape) -> Shape:
    return lambda items: [inner(i) for i in items] if isinstance(items, list) else items
