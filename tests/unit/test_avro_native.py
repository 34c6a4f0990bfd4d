"""The C Avro decoder against fastavro: the same column and the same bad rows, for writer and
reader schemas of every kind Avro's resolution covers (promotions, skipped and defaulted
fields, enums by name, unions both ways, nested arrays, maps and records, decimals, logical
types), random records of each, and bytes cut or corrupted at random."""

from __future__ import annotations

import io
import json
import random
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from spark_groups.formats import avro_native
from spark_groups.formats.avro_decode import AvroColumn
from spark_groups.formats.registry import ReaderSchema

pytestmark = pytest.mark.skipif(avro_native._avro is None, reason="the C decoder is not built")

POINT = {"type": "record", "name": "Point", "fields": [
    {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "double"]}]}  # fmt: skip
WRITER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "name", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "LOST"]},
        },
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 3}},
        {
            "name": "total",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {
            "name": "cents",
            "type": {
                "type": "fixed",
                "name": "Cents",
                "size": 8,
                "logicalType": "decimal",
                "precision": 18,
                "scale": 0,
            },
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"]},
        {"name": "where", "type": [POINT, "null"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {
            "name": "attrs",
            "type": {"type": "map", "values": {"type": "array", "items": ["null", "long"]}},
        },
        {"name": "dropped", "type": {"type": "map", "values": ["null", "Point", "string"]}},
        {"name": "mixed", "type": ["null", "int", "string"]},
        {"name": "grows", "type": "int"},
    ],
}
#: The writer schema resolved: ``dropped`` skipped; promotions; an enum with a default; new
#: fields with defaults; ``mixed``'s int branch unreadable as a string.
READER = {
    **WRITER,
    "fields": [
        f for f in (
            {**f, "type": "double"} if f["name"] == "price" else
            {**f, "type": "long"} if f["name"] == "grows" else
            {**f, "type": ["null", "string"]} if f["name"] == "mixed" else
            {**f, "type": "bytes"} if f["name"] == "name" else
            {**f, "type": {"type": "enum", "name": "Status", "symbols": ["PAID", "NEW", "OTHER"],
                           "default": "OTHER"}} if f["name"] == "status" else f
            for f in WRITER["fields"]
        ) if f["name"] != "dropped"
    ] + [
        {"name": "added", "type": "string", "default": "none"},
        {"name": "added_point", "type": "Point", "default": {"x": 7, "y": None}},
        {"name": "added_list", "type": {"type": "array", "items": "int"}, "default": [1, 2]},
        {"name": "added_null", "type": ["null", "long"], "default": None},
    ],
}  # fmt: skip


def value(schema: Any, named: dict[str, Any], rng: random.Random) -> Any:
    """A random value of ``schema``."""
    if isinstance(schema, str) and schema in named:
        return value(named[schema], named, rng)
    if isinstance(schema, list):
        return value(rng.choice(schema), named, rng)
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical == "decimal":
        digits = schema["precision"] - schema.get("scale", 0)
        whole = rng.randrange(-(10 ** min(digits, 15)) + 1, 10 ** min(digits, 15))
        return (
            Decimal(whole).scaleb(-schema.get("scale", 0))
            if schema.get("scale")
            else Decimal(whole)
        )
    simple = {
        "null": lambda: None,
        "boolean": lambda: rng.random() < 0.5,
        "int": lambda: rng.randrange(-(2**31), 2**31),
        "long": lambda: rng.randrange(-(2**63), 2**63),
        "float": lambda: float(rng.randrange(-1000, 1000)) / 8,
        "double": lambda: rng.uniform(-1e9, 1e9),
        "string": lambda: "".join(rng.choice("aé€𝄞z ") for _ in range(rng.randrange(6))),
        "bytes": lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(5))),
    }
    if logical == "date":
        return rng.randrange(0, 30_000)
    if logical == "timestamp-millis":
        return rng.randrange(0, 2**41)
    if kind in simple:
        return simple[kind]()
    if kind == "enum":
        return rng.choice(schema["symbols"])
    if kind == "fixed":
        return bytes(rng.randrange(256) for _ in range(schema["size"]))
    if kind == "array":
        return [value(schema["items"], named, rng) for _ in range(rng.randrange(4))]
    if kind == "map":
        return {f"k{i}": value(schema["values"], named, rng) for i in range(rng.randrange(3))}
    if kind == "record":
        named.setdefault(schema["name"], schema)
        return {f["name"]: value(f["type"], named, rng) for f in schema["fields"]}
    return value(named[kind], named, rng)


def framed(schema_id: int, parsed: Any, record: Any) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


class Schemas:
    url = "http://reg:8081"

    def __init__(self, schemas: dict[int, Any]) -> None:
        self.schemas = schemas

    def by_id(self, schema_id: int) -> ReaderSchema | None:
        schema = self.schemas.get(schema_id)
        return None if schema is None else ReaderSchema(schema_id, json.dumps(schema), "AVRO")


def both(reader_id: int, schemas: dict[int, Any], values: list[bytes | None]) -> tuple[Any, Any]:
    """(C's column and bad rows, fastavro's), as lists."""
    reader = ReaderSchema(reader_id, json.dumps(schemas[reader_id]), "AVRO")
    native = AvroColumn(reader, Schemas(schemas))  # type: ignore[arg-type]
    assert native._native is not None, "the reader schema should compile"
    c_column, c_bad = native.decode(values)
    plain = AvroColumn(reader, Schemas(schemas))  # type: ignore[arg-type]
    plain._native = None
    f_column, f_bad = plain.decode(values)
    assert c_column.type == f_column.type
    return (c_column.to_pylist(), [(b.row, b.schema_id) for b in c_bad]), (
        f_column.to_pylist(),
        [(b.row, b.schema_id) for b in f_bad],
    )


@pytest.mark.parametrize("seed", range(6))
def test_random_records_decode_as_fastavro_decodes_them(seed: int) -> None:
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(WRITER)
    records = [value(WRITER, {"Point": POINT, "shop.Point": POINT}, rng) for _ in range(300)]
    values: list[bytes | None] = [framed(1, parsed, r) for r in records]
    values[5] = None
    c, f = both(2, {1: WRITER, 2: READER}, values)
    assert c[0] == f[0]
    assert c[1] == f[1]
    # ``mixed``'s int branch cannot be read as a string: bad on both paths, the same rows
    assert {row for row, _ in c[1]} == {
        i for i, r in enumerate(records) if i != 5 and isinstance(r["mixed"], int)
    }
    assert any(row is not None and row["added_point"] == {"x": 7, "y": None} for row in c[0])


@pytest.mark.parametrize("seed", range(4))
def test_cut_and_corrupted_bytes_are_bad_rows_as_with_fastavro(seed: int) -> None:
    rng = random.Random(100 + seed)
    parsed = fastavro.parse_schema(WRITER)
    values: list[bytes | None] = []
    for _ in range(300):
        data = framed(1, parsed, value(WRITER, {"Point": POINT, "shop.Point": POINT}, rng))
        cut = rng.random()
        if cut < 0.3:
            data = data[: rng.randrange(5, len(data))]
        elif cut < 0.6:
            at = rng.randrange(5, len(data))
            data = data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
        values.append(data)
    c, f = both(2, {1: WRITER, 2: READER}, values)
    c_rows = {row for row, _ in c[1]}
    # Whatever C reads, it reads as fastavro does; where C refuses, the record is bad there.
    for i, (c_value, f_value) in enumerate(zip(c[0], f[0], strict=True)):
        if i not in c_rows and i not in {row for row, _ in f[1]}:
            assert c_value == f_value, i
    # and what fastavro cannot read, C does not read either
    assert c_rows >= {row for row, _ in f[1]}
    assert len(c_rows) > 50  # the corruption was seen


def test_a_writer_schema_that_does_not_compile_decodes_with_fastavro() -> None:
    several = {
        "type": "record",
        "name": "U",
        "fields": [{"name": "u", "type": ["null", "string", "long"]}],
    }
    reader = ReaderSchema(1, json.dumps(several), "AVRO")
    column = AvroColumn(reader, Schemas({1: several}))  # type: ignore[arg-type]
    assert column._native is None  # a union of several types: fastavro's
    decoded, bad = column.decode([framed(1, fastavro.parse_schema(several), {"u": 5})])
    assert bad == [] and decoded.to_pylist() == [{"u": {"member0": None, "member1": 5}}]


def test_an_empty_batch_and_all_nulls() -> None:
    c, f = both(1, {1: POINT}, [])
    assert c == f == ([], [])
    c, f = both(1, {1: POINT}, [None, None])
    assert c == f == ([None, None], [])
    assert pa.array(c[0], pa.struct([("x", pa.int32()), ("y", pa.float64())])).null_count == 2
