"""Avro schema resolution compiled for the C decoder (``spark_groups.formats._avro``).

:class:`Layout` lays a reader schema out as columns (one per struct, list, map and leaf, in
preorder, as its raw Arrow type nests them) and assembles the C decoder's buffers into that
Arrow array. :meth:`Layout.program` compiles one writer schema against the reader schema
into the operations ``_avro.c`` runs per record, following Avro's resolution rules: writer
fields the reader lacks skipped, reader fields the writer lacks filled from their defaults
(encoded once, read like a record's bytes), promotions (int to long, float and double; long
to float and double; float to double; string and bytes to each other), enum symbols by name,
unions branch by branch (a branch the reader cannot take makes the record bad, as in Avro).

What it does not compile raises :class:`Unsupported`, and the column decodes with fastavro
instead (the same values, slower): a reader union of several non-null types, aliases,
records or enums whose names differ between writer and reader.
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# Column kinds and operations: the enums of _avro.c, in order.
K_STRUCT, K_BOOL, K_I32, K_I64, K_F32, K_F64, K_BIN, K_STR, K_LIST, K_DEC = range(10)
(END, LONG, INT, INT_LONG, INT_FLOAT, INT_DOUBLE, LONG_FLOAT, LONG_DOUBLE, FLOAT,
 FLOAT_DOUBLE, DOUBLE, BOOL, BYTES, FIXED, DEC_BYTES, DEC_FIXED, ENUM, STRUCT, NULL,
 SKIP_VARINT, SKIP_N, SKIP_BYTES, UNION, JUMP, ARRAY, CONST, ERROR, STRING) = range(28)  # fmt: skip
#: What each reason code of _avro.c means (an ERROR operation's is its own message).
REASONS = {
    1: "no header",
    2: "its bytes do not parse as Avro with its writer schema: truncated or malformed",
    3: "its bytes do not parse as Avro with its writer schema: an enum index out of range",
    4: "its bytes do not parse as Avro with its writer schema: a union index out of range",
    5: "its enum symbol is not in the reader schema's enum, which has no default",
    6: "its bytes do not parse as Avro with its writer schema: a string is not UTF-8",
    7: "a decimal does not fit the reader schema's precision",
    8: "its bytes do not parse as Avro with its writer schema: an int beyond 32 bits",
    9: "out of memory",
}
ERROR_BASE = 100

_LEAF_KINDS = {
    "boolean": K_BOOL, "int": K_I32, "long": K_I64, "float": K_F32, "double": K_F64,
    "bytes": K_BIN, "string": K_STR, "enum": K_STR, "fixed": K_BIN,
}  # fmt: skip
#: (writer type, reader type) -> the operation that reads the one into the other.
_READS = {
    ("int", "int"): INT, ("long", "long"): LONG, ("int", "long"): INT_LONG,
    ("int", "float"): INT_FLOAT, ("int", "double"): INT_DOUBLE,
    ("long", "float"): LONG_FLOAT, ("long", "double"): LONG_DOUBLE,
    ("float", "float"): FLOAT, ("float", "double"): FLOAT_DOUBLE, ("double", "double"): DOUBLE,
    ("boolean", "boolean"): BOOL, ("string", "string"): STRING, ("bytes", "bytes"): BYTES,
    ("string", "bytes"): STRING, ("bytes", "string"): BYTES,
}  # fmt: skip
_SKIPS: dict[str, list[int]] = {
    "null": [], "boolean": [SKIP_N, 1], "int": [SKIP_VARINT], "long": [SKIP_VARINT],
    "float": [SKIP_N, 4], "double": [SKIP_N, 8], "bytes": [SKIP_BYTES], "string": [SKIP_BYTES],
    "enum": [SKIP_VARINT],
}  # fmt: skip


class Unsupported(Exception):
    """The C decoder does not compile this schema (fastavro decodes it)."""


@dataclass
class Node:
    """One column of the reader's layout: its kind, index, raw Arrow type, children."""

    kind: int
    col: int
    arrow: pa.DataType
    children: list[Node] = field(default_factory=list)


class Tables:
    """The enum tables and encoded defaults the programs of one layout refer to by index;
    grows as writer schemas are compiled."""

    def __init__(self) -> None:
        self.enums: list[tuple[bytes | None, ...]] = []
        self.consts: list[bytes] = []
        self.errors: list[str] = []

    def error(self, message: str) -> list[int]:
        """An ERROR operation with ``message``."""
        self.errors.append(message)
        return [ERROR, len(self.errors) - 1]


class Layout:
    """A reader schema (fastavro's parsed form) laid out as the columns of its raw Arrow type
    ``raw``; raises :class:`Unsupported` for a reader schema the C decoder does not take."""

    def __init__(self, reader: Any, raw: pa.DataType) -> None:
        self.reader = reader
        self.named: Mapping[str, Any] = _named(reader)
        self.nodes: list[Node] = []
        self.root = self._layout(reader, raw, ())
        self.kinds = bytes(n.kind for n in self.nodes)
        self.tables = Tables()
        self.null_program = array("i", [*self._nulls(self.root), END]).tobytes()

    # -- the columns --------------------------------------------------------------------
    def _node(self, kind: int, arrow: pa.DataType) -> Node:
        node = Node(kind, len(self.nodes), arrow)
        self.nodes.append(node)
        return node

    def _layout(self, schema: Any, raw: pa.DataType, seen: tuple[str, ...]) -> Node:
        schema = _deref(schema, self.named)
        if isinstance(schema, list):
            others = [b for b in schema if b != "null"]
            if len(others) != 1:
                raise Unsupported("a reader union of several types")
            return self._layout(others[0], raw, seen)
        kind = _kind(schema)
        if kind in ("record", "error"):
            node = self._node(K_STRUCT, raw)
            for i, f in enumerate(schema["fields"]):
                if f.get("aliases"):
                    raise Unsupported("field aliases")
                node.children.append(self._layout(f["type"], raw.field(i).type, seen))
            return node
        if kind == "array":
            node = self._node(K_LIST, raw)
            node.children.append(self._layout(schema["items"], raw.value_type, seen))
            return node
        if kind == "map":
            node = self._node(K_LIST, raw)
            node.children.append(self._node(K_STR, pa.string()))
            node.children.append(self._layout(schema["values"], raw.item_type, seen))
            return node
        if isinstance(schema, dict) and schema.get("logicalType") == "decimal":
            if not pa.types.is_decimal128(raw):
                raise Unsupported("a decimal of another Arrow type")
            return self._node(K_DEC, raw)
        if kind not in _LEAF_KINDS:
            raise Unsupported(f"the Avro type {kind}")
        return self._node(_LEAF_KINDS[kind], raw)

    def _nulls(self, node: Node) -> list[int]:
        """The operations that make ``node`` null (a struct's children get entries too)."""
        out = [NULL, node.col]
        if node.kind == K_STRUCT:
            for child in node.children:
                out += self._nulls(child)
        return out

    # -- a writer schema's program --------------------------------------------------------
    def program(self, writer: Any, why: str) -> bytes:
        """The operations that read a record written with ``writer`` (fastavro's parsed
        form) into this layout; a record they cannot read is bad with ``why`` and the
        reason."""
        compiler = _Compiler(self, _named(writer), why)
        try:
            ops = compiler.resolve(writer, self.reader, self.root)
        except _Mismatch as exc:
            return self.error_program(f"{why}{exc}")
        return compiler.finish(ops)

    def error_program(self, message: str) -> bytes:
        """A program that makes every record bad with ``message`` (an unknown schema id)."""
        return array("i", [*self.tables.error(message), END]).tobytes()

    # -- the array ------------------------------------------------------------------------
    def assemble(self, columns: list[tuple[bytes | None, bytes, bytes | None, int]]) -> pa.Array:
        """The raw Arrow array of the C decoder's ``columns``."""
        return self._array(self.root, columns)

    def _array(self, node: Node, columns: list[Any]) -> pa.Array:
        valid, a, b, n = columns[node.col]
        validity = None if valid is None else pa.py_buffer(valid)
        if node.kind == K_STRUCT:
            children = [self._array(c, columns) for c in node.children]
            return pa.Array.from_buffers(node.arrow, n, [validity], children=children)
        if node.kind == K_LIST:
            children = [self._array(c, columns) for c in node.children]
            if pa.types.is_map(node.arrow):
                keys, items = children
                entries_type = pa.struct([node.arrow.key_field, node.arrow.item_field])
                entries = pa.Array.from_buffers(
                    entries_type, len(keys), [None], children=[keys, items]
                )
                children = [entries]
            return pa.Array.from_buffers(
                node.arrow, n, [validity, pa.py_buffer(a)], children=children
            )
        if node.kind in (K_BIN, K_STR):
            buffers = [validity, pa.py_buffer(a), pa.py_buffer(b or b"")]
            return pa.Array.from_buffers(node.arrow, n, buffers)
        return pa.Array.from_buffers(node.arrow, n, [validity, pa.py_buffer(a)])


class _Compiler:
    """Compiles one writer schema against a :class:`Layout` (its jumps absolute, so the
    operations are placed once, in :meth:`finish`)."""

    def __init__(self, layout: Layout, writer_named: Mapping[str, Any], why: str) -> None:
        self.layout = layout
        self.why = why
        self.tables = layout.tables
        self.wnamed = writer_named
        self.rnamed = layout.named

    def finish(self, ops: list[Any]) -> bytes:
        flat: list[int] = []
        self._place(ops, flat)
        flat.append(END)
        return array("i", flat).tobytes()

    def _place(self, ops: list[Any], flat: list[int]) -> None:
        """Lay ``ops`` out in ``flat``: ints as they are, a ``("union", branches)`` as a
        jump table over its branches, each ending with a jump past the last (offsets relative
        to the operation, so a placed body can move)."""
        for op in ops:
            if isinstance(op, int):
                flat.append(op)
                continue
            tag, branches = op
            assert tag == "union"
            union = len(flat)
            flat += [UNION, len(branches), *([0] * len(branches))]
            jumps = []
            for i, branch in enumerate(branches):
                flat[union + 2 + i] = len(flat) - union
                self._place(branch, flat)
                jumps.append(len(flat))
                flat += [JUMP, 0]
            for j in jumps:
                flat[j + 1] = len(flat) - j

    def _body(self, ops: list[Any]) -> list[Any]:
        """``ops`` placed on their own (an array's or a default's body)."""
        flat: list[int] = []
        self._place(ops, flat)
        return flat

    def resolve(self, w: Any, r: Any, node: Node) -> list[Any]:
        """The operations reading a value written as ``w`` into ``node`` (reader ``r``)."""
        w, r = _deref(w, self.wnamed), _deref(r, self.rnamed)
        if isinstance(w, list):
            return [("union", [self._branch(b, r, node) for b in w])]
        if isinstance(r, list):
            if w == "null":
                return self.layout._nulls(node)
            return self.resolve(w, next(b for b in r if b != "null"), node)
        return self._resolve_one(w, r, node)

    def _branch(self, w: Any, r: Any, node: Node) -> list[Any]:
        """One branch of a writer union."""
        if w == "null":
            if isinstance(r, list):
                return self.layout._nulls(node)
            return self.tables.error(
                f"{self.why}its writer schema's union holds null where the reader schema's "
                "type is not nullable"
            )
        try:
            return self.resolve(w, r, node)
        except _Mismatch as exc:
            return self.tables.error(f"{self.why}{exc}")

    def _resolve_one(self, w: Any, r: Any, node: Node) -> list[Any]:
        wk, rk = _kind(w), _kind(r)
        if isinstance(r, dict) and r.get("logicalType") == "decimal":
            return self._decimal(w, r, node)
        if rk in ("record", "error"):
            return self._record(w, r, node)
        if rk == "enum":
            return self._enum(w, r, node)
        if rk == "fixed":
            if wk != "fixed" or w.get("size") != r.get("size") or w.get("name") != r.get("name"):
                raise _Mismatch(
                    f"a {wk} cannot be read as the reader schema's fixed {r.get('name')}"
                )
            return [FIXED, node.col, int(r["size"])]
        if rk in ("array", "map"):
            if wk != rk:
                raise _Mismatch(f"a {wk} cannot be read as the reader schema's {rk}")
            if rk == "array":
                body = self.resolve(w["items"], r["items"], node.children[0])
                sized = _takes_bytes(w["items"], self.wnamed)
            else:
                key, value = node.children
                body = [STRING, key.col, *self.resolve(w["values"], r["values"], value)]
                sized = 1
            flat = self._body(body)
            return [ARRAY, node.col, len(flat), sized, *flat]
        op = _READS.get((wk, rk))
        if op is None:
            raise _Mismatch(f"a {wk} cannot be read as the reader schema's {rk}")
        return [op, node.col]

    def _decimal(self, w: Any, r: Any, node: Node) -> list[Any]:
        wk = _kind(w)
        same = (
            isinstance(w, dict)
            and w.get("logicalType") == "decimal"
            and int(w.get("scale", 0)) == int(r.get("scale", 0))
        )
        if not same:
            raise Unsupported("a decimal read from another type or scale")
        precision = int(r["precision"])
        if wk == "bytes":
            return [DEC_BYTES, node.col, precision]
        if wk == "fixed":
            return [DEC_FIXED, node.col, int(w["size"]), precision]
        raise Unsupported(f"a decimal of {wk}")

    def _record(self, w: Any, r: Any, node: Node) -> list[Any]:
        if _kind(w) not in ("record", "error"):
            raise _Mismatch(f"a {_kind(w)} cannot be read as the reader schema's record")
        if w.get("name") != r.get("name"):
            raise Unsupported("records of different names")
        readers = {f["name"]: (i, f) for i, f in enumerate(r["fields"])}
        out: list[Any] = [STRUCT, node.col]
        read: set[str] = set()
        for wf in w["fields"]:
            found = readers.get(wf["name"])
            if found is None:
                out += self._skip(wf["type"])
                continue
            i, rf = found
            read.add(rf["name"])
            out += self.resolve(wf["type"], rf["type"], node.children[i])
        for name, (i, rf) in readers.items():
            if name in read:
                continue
            if "default" not in rf:
                raise _Mismatch(
                    f"the reader schema's field {r.get('name')}.{name} has no default and the "
                    "writer schema lacks it"
                )
            flat = self._body(self._identity(rf["type"], node.children[i]))
            out += [CONST, self._default(rf), len(flat), *flat]
        return out

    def _identity(self, r: Any, node: Node) -> list[Any]:
        """Reading a value encoded with the reader's own type (a default)."""
        compiler = _Compiler(self.layout, self.rnamed, self.why)
        return compiler.resolve(r, r, node)

    def _default(self, rf: Mapping[str, Any]) -> int:
        """The index of ``rf``'s default, encoded with its type (fastavro)."""
        import fastavro

        schema = {"type": "record", "name": "_default", "fields": [
            {"name": "v", "type": _inline(rf["type"], self.rnamed)}]}  # fmt: skip
        out = io.BytesIO()
        try:
            parsed = fastavro.parse_schema(schema, _write_hint=False)
            fastavro.schemaless_writer(out, parsed, {"v": rf["default"]})
        except Exception as exc:  # a default that does not fit its type
            raise Unsupported(f"the default of {rf['name']}: {exc}") from None
        self.tables.consts.append(out.getvalue())
        return len(self.tables.consts) - 1

    def _enum(self, w: Any, r: Any, node: Node) -> list[Any]:
        if _kind(w) != "enum":
            raise _Mismatch(f"a {_kind(w)} cannot be read as the reader schema's enum")
        if w.get("name") != r.get("name"):
            raise Unsupported("enums of different names")
        symbols = set(r["symbols"])
        default = r.get("default")
        table = tuple(
            s.encode() if s in symbols else (default.encode() if default is not None else None)
            for s in w["symbols"]
        )
        self.tables.enums.append(table)
        return [ENUM, node.col, len(self.tables.enums) - 1]

    def _skip(self, w: Any) -> list[Any]:
        """The operations skipping a value written as ``w``."""
        w = _deref(w, self.wnamed)
        if isinstance(w, list):
            return [("union", [self._skip(b) for b in w])]
        kind = _kind(w)
        if kind in _SKIPS:
            return list(_SKIPS[kind])
        if kind == "fixed":
            return [SKIP_N, int(w["size"])]
        if kind in ("record", "error"):
            return [op for f in w["fields"] for op in self._skip(f["type"])]
        if kind == "array":
            flat = self._body(self._skip(w["items"]))
            return [ARRAY, -1, len(flat), _takes_bytes(w["items"], self.wnamed), *flat]
        if kind == "map":
            flat = self._body([SKIP_BYTES, *self._skip(w["values"])])
            return [ARRAY, -1, len(flat), 1, *flat]
        raise Unsupported(f"skipping the Avro type {kind}")


class _Mismatch(Exception):
    """A writer type the reader's cannot take: the records that use it are bad."""


def _named(schema: Any) -> Mapping[str, Any]:
    return schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}


def _deref(schema: Any, named: Mapping[str, Any]) -> Any:
    while isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        return _deref(schema["type"], named)
    if isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in named:
        return _deref(schema["type"], named)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema["type"])


def _takes_bytes(schema: Any, named: Mapping[str, Any]) -> int:
    """1 when every value of ``schema`` takes a byte at least (0: null, an empty record)."""
    schema = _deref(schema, named)
    kind = _kind(schema)
    if kind == "null":
        return 0
    if kind in ("record", "error"):
        return int(any(_takes_bytes(f["type"], named) for f in schema["fields"]))
    if kind == "fixed":
        return int(int(schema["size"]) > 0)
    return 1


def _inline(schema: Any, named: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """``schema`` with the named types it refers to written out (once each), so fastavro can
    encode a default on its own."""
    if isinstance(schema, str):
        if schema in named and schema not in seen:
            return _inline(named[schema], named, seen | {schema})
        return schema
    if isinstance(schema, list):
        return [_inline(b, named, seen) for b in schema]
    out = {k: v for k, v in schema.items() if not k.startswith("__")}
    if "name" in out:
        seen = seen | {out["name"]}
    for key in ("items", "values"):
        if key in out:
            out[key] = _inline(out[key], named, seen)
    if isinstance(out.get("type"), dict | list):
        out["type"] = _inline(out["type"], named, seen)
    if "fields" in out:
        out["fields"] = [{**f, "type": _inline(f["type"], named, seen)} for f in out["fields"]]
    return out
