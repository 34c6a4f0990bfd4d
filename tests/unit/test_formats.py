"""Record formats without a registry server: the options, Avro's type mapping, decoding with
schema resolution, the bad records of each kind, and the dead-letter table.

The registry here is a table of schemas by id (``Schemas``); tests/integration/test_formats.py
runs the same paths against a real registry server and Spark."""

from __future__ import annotations

import datetime as dt
import io
import json
import pickle
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from spark_groups.errors import OptionError, RecordDecodeError, SchemaRegistryError
from spark_groups.formats import bad_records
from spark_groups.formats.avro_decode import AvroColumn
from spark_groups.formats.avro_types import AvroSchemaError, avro_shape
from spark_groups.formats.decoder import DecodePlan, Decoding
from spark_groups.formats.registry import ReaderSchema, Registry
from spark_groups.formats.spark_ddl import ddl_type
from spark_groups.options import parse_options
from spark_groups.read.schema import arrow_schema

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "group.id": "etl"}
AVRO = {**BASE, "value.format": "avro-confluent", "schema.registry.url": "http://reg:8081"}

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": "none"}],
}
#: Not resolvable from V1's records: a new field without a default.
ORDER_BAD = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "must", "type": "string"}]}


class Schemas:
    """A registry of schemas by id, as :class:`AvroColumn` asks one (``by_id``, ``url``)."""

    url = "http://reg:8081"

    def __init__(self, schemas: dict[int, Any]) -> None:
        self.schemas = schemas
        self.asked: list[int] = []

    def by_id(self, schema_id: int) -> ReaderSchema | None:
        self.asked.append(schema_id)
        schema = self.schemas.get(schema_id)
        return None if schema is None else ReaderSchema(schema_id, json.dumps(schema), "AVRO")


def framed(schema_id: int, schema: Any, record: dict[str, Any]) -> bytes:
    """``record`` as Confluent's AvroSerializer writes it (header, then the Avro bytes)."""
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def column(reader_id: int, schemas: dict[int, Any]) -> tuple[AvroColumn, Schemas]:
    registry = Schemas(schemas)
    reader = ReaderSchema(reader_id, json.dumps(schemas[reader_id]), "AVRO")
    return AvroColumn(reader, registry), registry  # type: ignore[arg-type]


AT = dt.datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=dt.UTC)


@pytest.fixture(autouse=True, params=["c", "fastavro"])
def avro_read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case on both Avro decoders: the C one (where the install built it; .ci/run
    requires it) and fastavro, which decodes where C is not built or does not take a
    schema."""
    from spark_groups.formats import avro_native, decoder

    monkeypatch.setattr(decoder, "_columns", {})  # no column decoder kept from the other path
    if request.param == "c":
        if avro_native._avro is None:
            pytest.skip("the C Avro decoder is not built here (no C compiler at install)")
    else:
        monkeypatch.setattr(avro_native, "_avro", None)
    return str(request.param)


# -- the options ---------------------------------------------------------------------------


def test_raw_is_the_default_and_decodes_nothing() -> None:
    o = parse_options(BASE)
    assert (o.formats.key.format, o.formats.value.format) == ("raw", "raw")
    assert o.formats.decoded == ()


def test_avro_options_with_the_registry_settings_kept_out_of_repr() -> None:
    o = parse_options(
        {
            **AVRO,
            "schema.registry.basic.auth.user.info": "reader:s3cret",
            "schema.registry.max.retries": "5",
            "value.subject.name.strategy": "topic-record",
            "value.record.name": "shop.Order",
            "value.schema.version": "3",
        }
    )
    value = o.formats.value
    assert (value.format, value.strategy, value.version) == ("avro-confluent", "topic-record", 3)
    assert value.subjects(o.topics) == ("orders-shop.Order",)
    assert o.formats.registry == {
        "url": "http://reg:8081",
        "basic.auth.user.info": "reader:s3cret",
        "max.retries": 5,
    }
    assert "s3cret" not in repr(o) and "s3cret" not in repr(o.formats)


NO_FORMAT: dict[str, str | None] = {"value.format": None, "schema.registry.url": None}


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"schema.registry.url": None}, "schema.registry.url"),
        ({"schema.registry.url": "reg:8081"}, "schema.registry.url"),
        ({"value.format": "avro"}, "value.format"),
        ({"value.subject.name.strategy": "record"}, "value.record.name"),
        ({"value.schema.version": "0"}, "value.schema.version"),
        ({"value.schema.version": "2", "value.schema.id": "7"}, "value.schema.id"),
        ({"schema.registry.max.retries": "many"}, "schema.registry.max.retries"),
        (NO_FORMAT | {"includeRawBytes": "true"}, "includeRawBytes"),
        (NO_FORMAT | {"deadLetter.table": "/tmp/dl"}, "deadLetter.table"),
        ({"key.subject": "k"}, "key.subject"),
    ],
)
def test_bad_format_options_name_the_option(changes: dict[str, str | None], option: str) -> None:
    options = {k: v for k, v in {**AVRO, **changes}.items() if v is not None}
    with pytest.raises(OptionError) as err:
        parse_options(options)
    assert err.value.option == option


def test_a_pattern_needs_a_named_subject() -> None:
    options = {**AVRO, "subscribePattern": "orders.*"}
    del options["subscribe"]
    with pytest.raises(OptionError) as err:
        parse_options(options)
    assert err.value.option == "value.subject"
    assert parse_options({**options, "value.subject": "orders-value"}).formats.value.subjects(
        ()
    ) == ("orders-value",)


def test_registry_options_without_a_format_are_refused() -> None:
    with pytest.raises(OptionError) as err:
        parse_options({**BASE, "schema.registry.url": "http://reg:8081"})
    assert err.value.option == "schema.registry.url"


def test_an_unknown_registry_setting_is_named_and_credentials_are_not() -> None:
    with pytest.raises(OptionError) as err:
        Registry({"url": "http://u:pw@reg:8081", "no.such.setting": "1"}, 1000)
    assert err.value.option == "schema.registry.no.such.setting"
    assert "pw" not in str(err.value)


def test_an_unreachable_registry_is_a_typed_error_naming_the_url_only(
    unused_port: int,
) -> None:
    registry = Registry(
        {"url": f"http://reader:s3cret@127.0.0.1:{unused_port}", "max.retries": 0}, 0
    )
    with pytest.raises(SchemaRegistryError) as err:
        registry.by_id(1)
    assert err.value.url == f"http://***@127.0.0.1:{unused_port}"
    assert "s3cret" not in str(err.value) and err.value.schema_id == 1
    assert pickle.loads(pickle.dumps(err.value)).url == err.value.url


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- Avro's types as Spark's from_avro maps them ----------------------------------------------


def test_avro_types_map_as_spark_maps_them() -> None:
    schema = {
        "type": "record",
        "name": "All",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "f", "type": "float"},
            {"name": "bs", "type": "bytes"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
            {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 2}},
            {
                "name": "dec",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "opt", "type": ["null", "string"]},
            {"name": "num", "type": ["int", "long"]},
            {"name": "either", "type": ["null", "string", "E"]},
            {"name": "xs", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": "double"}},
            {"name": "again", "type": "F"},
        ],
    }
    assert ddl_type(avro_shape(json.dumps(schema)).arrow) == (
        "struct<`b`:boolean,`i`:int,`f`:float,`bs`:binary,`e`:string,`fx`:binary,"
        "`dec`:decimal(9,2),`day`:date,`ts`:timestamp,`local`:timestamp_ntz,`tm`:int,"
        "`id`:string,`opt`:string,`num`:bigint,`either`:struct<`member0`:string,"
        "`member1`:string>,`xs`:array<bigint>,`m`:map<string,double>,`again`:binary>"
    )


def test_a_recursive_record_has_no_spark_type() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(AvroSchemaError, match="contains itself"):
        avro_shape(json.dumps(node))


# -- decoding ---------------------------------------------------------------------------------


def test_records_of_an_older_writer_schema_resolve_to_the_reader_schema() -> None:
    col, registry = column(2, {1: ORDER_V1, 2: ORDER_V2})
    values = [
        framed(1, ORDER_V1, {"id": 1, "amount": 2.5, "at": AT}),
        framed(2, ORDER_V2, {"id": 2, "amount": 1.0, "at": AT, "note": "gift"}),
        None,
        framed(1, ORDER_V1, {"id": 3, "amount": 0.0, "at": AT}),
    ]
    decoded, bad = col.decode(values)
    assert bad == []
    assert decoded.type == pa.struct(
        [("id", pa.int64()), ("amount", pa.float64()), ("at", pa.timestamp("us", tz="UTC")),
         ("note", pa.string())]
    )  # fmt: skip
    rows = decoded.to_pylist()
    assert [r and (r["id"], r["note"]) for r in rows] == [
        (1, "none"),
        (2, "gift"),
        None,
        (3, "none"),
    ]
    assert rows[0]["at"] == AT.replace(microsecond=250_000)
    assert registry.asked == [1]  # the reader schema's id is known; id 1 asked once


def test_each_kind_of_bad_record_is_named_with_its_schema_id() -> None:
    col, _ = column(3, {1: ORDER_V1, 3: ORDER_BAD})
    good = framed(1, ORDER_V1, {"id": 1, "amount": 2.5, "at": AT})
    decoded, bad = col.decode(
        [b"plain text", framed(9, ORDER_V1, {"id": 1, "amount": 1.0, "at": AT}), good]
    )
    assert decoded.null_count == 3
    assert [(b.row, b.schema_id) for b in bad] == [(0, None), (1, 9), (2, 1)]
    assert "Confluent header" in bad[0].reason
    assert "no schema with id 9" in bad[1].reason
    assert "cannot be resolved to the reader schema (id 3)" in bad[2].reason
    cut, _ = column(1, {1: ORDER_V1})
    decoded, bad = cut.decode([good[:8], good])
    assert decoded.to_pylist()[0] is None and decoded.to_pylist()[1]["id"] == 1
    assert [(b.row, b.schema_id) for b in bad] == [(0, 1)] and "do not parse" in bad[0].reason


def test_unions_of_several_types_fill_one_member() -> None:
    schema = {
        "type": "record",
        "name": "U",
        "fields": [{"name": "u", "type": ["null", "string", "long", {
            "type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}]}],
    }  # fmt: skip
    col, _ = column(1, {1: schema})
    decoded, bad = col.decode([framed(1, schema, {"u": v}) for v in ("a", 5, {"x": 1}, None)])
    assert bad == []
    assert [r["u"] for r in decoded.to_pylist()] == [
        {"member0": "a", "member1": None, "member2": None},
        {"member0": None, "member1": 5, "member2": None},
        {"member0": None, "member1": None, "member2": {"x": 1}},
        None,
    ]


def test_decimals_and_dates_decode_to_their_values() -> None:
    schema = {
        "type": "record",
        "name": "D",
        "fields": [
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
    col, _ = column(1, {1: schema})
    record = {"price": Decimal("12.34"), "day": dt.date(2026, 2, 28)}
    decoded, _ = col.decode([framed(1, schema, record)])
    assert decoded.to_pylist() == [record]


# -- a batch: bad records fail the task, or go to the dead-letter table ---------------------------


def plan(tmp_path: Path | None, include_raw: bool = False) -> DecodePlan:
    options = {**AVRO, "includeRawBytes": str(include_raw).lower()}
    if tmp_path is not None:
        options["deadLetter.table"] = str(tmp_path / "dead")
    formats = parse_options(options).formats
    reader = ReaderSchema(2, json.dumps(ORDER_V2), "AVRO")
    return DecodePlan(formats, {"value": reader}, "etl")


def batch_of(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pylist(
        [
            {"key": b"k", "value": v, "topic": "orders", "partition": 4, "offset": 100 + i,
             "timestamp": AT, "timestampType": 0}
            for i, v in enumerate(values)
        ][:n],
        schema=arrow_schema(False),
    )  # fmt: skip


def decoding(p: DecodePlan) -> Decoding:
    return Decoding(p, {"value": column(2, {1: ORDER_V1, 2: ORDER_V2})[0]})


def test_a_bad_record_without_dead_letters_fails_naming_partition_offset_and_schema() -> None:
    good = framed(1, ORDER_V1, {"id": 1, "amount": 2.5, "at": AT})
    with pytest.raises(RecordDecodeError) as err:
        decoding(plan(None)).decode(batch_of([good, good, b"\x00\x00\x00\x00\x07oops"]))
    e = err.value
    assert (e.topic, e.partition, e.offset, e.column, e.schema_id) == ("orders", 4, 102, "value", 7)
    assert "deadLetter.table" in str(e) and "restart" in str(e)
    assert pickle.loads(pickle.dumps(e)).offset == 102


def test_bad_records_go_to_the_dead_letter_table_once_and_the_batch_goes_on(
    tmp_path: Path,
) -> None:
    p = plan(tmp_path, include_raw=True)
    bad_records.ensure_table(str(tmp_path / "dead"))
    good = framed(1, ORDER_V1, {"id": 1, "amount": 2.5, "at": AT})
    batch = batch_of([good, b"nope", good, None])
    for _attempt in range(2):  # a retried task writes the same dead letters once
        run = decoding(p)
        out = run.decode(batch)
        run.finish()
        assert out.column("offset").to_pylist() == [100, 102, 103]
        assert out.schema == p.row_schema(arrow_schema(False))
        assert out.column("rawValue").to_pylist() == [good, good, None]
        assert out.column("value").to_pylist()[2] is None  # a tombstone stays null
    from deltalake import DeltaTable

    dead = DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().to_pylist()
    assert len(dead) == 1
    assert (dead[0]["offset"], dead[0]["value"], dead[0]["group"]) == (101, b"nope", "etl")
    assert dead[0]["dead_letter_error"].startswith("value: it does not start with")


def test_a_share_dead_letter_table_made_before_schema_ids_takes_the_column(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from spark_groups.share.dead_letters import SCHEMA, ensure_table
    from spark_groups.storage import delta

    path = str(tmp_path / "dead")
    older = pa.schema([f for f in SCHEMA if f.name != "schemaId"])
    assert delta.create_table(path, older, description="an older version's") is None
    ensure_table(path)
    assert DeltaTable(path).schema().to_arrow().names == SCHEMA.names
    row = {"topic": "t", "partition": 0, "offset": 5, "value": b"x", "schemaId": 9}
    assert bad_records.write(path, [row], None, SCHEMA) == 1
    assert bad_records.write(path, [row], None, SCHEMA) == 0  # held already: a retried task
    assert DeltaTable(path).to_pyarrow_table().column("schemaId").to_pylist() == [9]
    # a table of other columns is refused, naming the option and what it lacks
    other = str(tmp_path / "other")
    assert delta.create_table(other, pa.schema([("id", pa.int64())]), description="ids") is None
    with pytest.raises(OptionError, match=r"deadLetter\.table.*not a kafka-share dead-letter"):
        ensure_table(other)


# -- the sink's table when a reader schema grows ------------------------------------------------


def test_a_grown_struct_is_merged_into_the_table_only_with_merge_schema(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from spark_groups.errors import SinkError
    from spark_groups.sink.sink_table import SinkTable

    v1 = avro_shape(json.dumps(ORDER_V1)).arrow
    v2 = avro_shape(json.dumps(ORDER_V2)).arrow
    schema = lambda value: pa.schema([("id", pa.int64()), ("value", value)])  # noqa: E731
    path = str(tmp_path / "t")
    SinkTable(path).open(schema(v1), ())
    with pytest.raises(SinkError, match="mergeSchema=true"):
        SinkTable(path).open(schema(v2), ())
    SinkTable(path, merge_schema=True).open(schema(v2), ())
    assert DeltaTable(path).schema().to_arrow().field("value").type.num_fields == 4
    with pytest.raises(SinkError, match="only new nullable columns and struct fields"):
        SinkTable(path, merge_schema=True).open(schema(v1), ())  # a field the query lacks
    SinkTable(path).open(schema(v2), ())  # no change: no option needed


# -- JSON Schema --------------------------------------------------------------------------------

READING = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "celsius": {"type": ["number", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"$ref": "#/definitions/Place"},
        "extra": {},
    },
    "definitions": {"Place": {"type": "object", "properties": {"site": {"type": "string"}}}},
}


def json_framed(schema_id: int, value: Any) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + json.dumps(value).encode()


def test_json_schema_types_and_values_by_name() -> None:
    from spark_groups.formats.json_decode import JsonColumn

    schemas = {1: ReaderSchema(1, json.dumps(READING), "JSON"),
               2: ReaderSchema(2, json.dumps({"type": "object"}), "JSON"),
               3: ReaderSchema(3, json.dumps(ORDER_V1), "AVRO")}  # fmt: skip

    class JsonSchemas(Schemas):
        def by_id(self, schema_id: int) -> ReaderSchema | None:
            return schemas.get(schema_id)

    col = JsonColumn(schemas[1], JsonSchemas({}))  # type: ignore[arg-type]
    assert ddl_type(col.arrow_type) == (
        "struct<`id`:bigint,`celsius`:double,`tags`:array<string>,`where`:struct<`site`:string>,"
        "`extra`:string>"
    )
    decoded, bad = col.decode(
        [
            json_framed(
                2,
                {
                    "id": 1,
                    "celsius": 2.5,
                    "tags": ["a"],
                    "where": {"site": "x"},
                    "extra": {"any": [1]},
                    "unknown": True,
                },
            ),
            json_framed(1, {"id": 2}),
            json_framed(1, {"id": "three"}),  # does not fit bigint
            json_framed(3, {"id": 4}),  # an Avro schema's id
            json_framed(9, {"id": 5}),
            b"\x00\x00\x00\x00\x01{not json",
            None,
        ]
    )
    rows = decoded.to_pylist()
    assert rows[0] == {"id": 1, "celsius": 2.5, "tags": ["a"], "where": {"site": "x"},
                       "extra": '{"any":[1]}'}  # fmt: skip
    assert rows[1] == {"id": 2, "celsius": None, "tags": None, "where": None, "extra": None}
    assert rows[6] is None
    assert [(b.row, b.schema_id) for b in bad] == [(2, None), (3, 3), (4, 9), (5, 1)]
    assert "does not fit" in bad[0].reason and "not JSON Schema" in bad[1].reason
    assert "not JSON" in bad[3].reason


def test_a_recursive_or_dangling_json_schema_has_no_spark_type() -> None:
    from spark_groups.formats.json_types import JsonSchemaError, json_shape

    node = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    with pytest.raises(JsonSchemaError, match="contains itself"):
        json_shape(json.dumps({"$ref": "#/definitions/N", "definitions": {"N": node}}).replace(
            '"#"', '"#/definitions/N"'))  # fmt: skip
    with pytest.raises(JsonSchemaError, match="does not define"):
        json_shape(json.dumps({"$ref": "#/definitions/Missing"}))


def test_schema_references_are_fetched_depth_first_and_their_types_used() -> None:
    """Apicurio 2.1.5, the tests' registry, refuses Avro schemas with references (HTTP 422,
    "Failed to discover artifact type from content"), so confluent-kafka's own classes stand
    in for the registry's answers here."""
    from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaReference

    from spark_groups.options.formats import ColumnFormat

    money = {
        "type": "record",
        "name": "Money",
        "namespace": "shop",
        "fields": [{"name": "cents", "type": "long"}, {"name": "cur", "type": "shop.Code"}],
    }
    code = {"type": "enum", "name": "Code", "namespace": "shop", "symbols": ["EUR", "USD"]}
    order = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": "shop.Money"}],
    }
    versions = {
        ("shop.Code", 1): RegisteredSchema("shop.Code", 1, 11, None, Schema(json.dumps(code))),
        ("shop.Money", 1): RegisteredSchema("shop.Money", 1, 12, None, Schema(
            json.dumps(money), "AVRO", [SchemaReference("shop.Code", "shop.Code", 1)])),
        ("orders-value", "latest"): RegisteredSchema("orders-value", 3, 13, None, Schema(
            json.dumps(order), "AVRO", [SchemaReference("shop.Money", "shop.Money", 1)])),
    }  # fmt: skip

    class Answers:
        def get_version(self, subject: str, version: Any, fmt: Any = None) -> RegisteredSchema:
            return versions[(subject, version)]

    registry = Registry({"url": "http://reg:8081"}, 0)
    registry._client = Answers()  # type: ignore[assignment]
    reader = registry.reader_schema(ColumnFormat("value", "avro-confluent"), ("orders",))
    assert (reader.schema_id, reader.version) == (13, 3)
    assert [name for name, _ in reader.references] == ["shop.Code", "shop.Money"]
    assert ddl_type(avro_shape(reader.text, reader.references).arrow) == (
        "struct<`id`:bigint,`price`:struct<`cents`:bigint,`cur`:string>>"
    )
    col = AvroColumn(reader, Schemas({}))  # type: ignore[arg-type]
    out = io.BytesIO()
    out.write(b"\x00" + (13).to_bytes(4, "big"))
    named: dict[str, Any] = {}
    for ref in (code, money):
        fastavro.parse_schema(ref, named_schemas=named)
    writer = fastavro.parse_schema(order, named_schemas=named)
    fastavro.schemaless_writer(out, writer, {"id": 1, "price": {"cents": 250, "cur": "USD"}})
    decoded, bad = col.decode([out.getvalue()])
    assert bad == [] and decoded.to_pylist() == [{"id": 1, "price": {"cents": 250, "cur": "USD"}}]
