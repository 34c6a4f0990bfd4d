"""protobuf-confluent without a registry server: Spark's type mapping, the message indexes,
evolution by field number, each kind of bad record, and both forms a registry holds a schema
in (.proto text, compiled by protoc; the base64 descriptor confluent-kafka registers).

The registry here is a table of schemas by id (``Schemas``); the records are framed by
confluent-kafka's own ``SchemaId``; tests/integration/test_registry_formats.py runs the same
paths against a real registry server and Spark."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.common.protobuf import _create_index_array
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf.message_factory import GetMessageClass

from spark_groups.formats.protobuf_decode import ProtobufColumn, message_indexes
from spark_groups.formats.protobuf_schema import ProtobufSchemaError, load
from spark_groups.formats.protobuf_types import ProtobufTypeError, message_shape
from spark_groups.formats.registry import ReaderSchema
from spark_groups.formats.spark_ddl import ddl_type

from support.protobuf import ORDER_BAD, ORDER_V1, ORDER_V2

AT = dt.datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=dt.UTC)


class Schemas:
    """A registry of Protobuf schemas by id, as :class:`ProtobufColumn` asks one."""

    url = "http://reg:8081"

    def __init__(self, schemas: dict[int, str]) -> None:
        self.schemas = schemas
        self.asked: list[tuple[int, str | None]] = []

    def by_id(self, schema_id: int, fmt: str | None = None) -> ReaderSchema | None:
        self.asked.append((schema_id, fmt))
        text = self.schemas.get(schema_id)
        return None if text is None else ReaderSchema(schema_id, text, "PROTOBUF")


def message_class(schema_id: int, text: str, name: str = "shop.Order") -> Any:
    """The message class of ``text`` as schema ``schema_id`` (its pool's file name)."""
    return GetMessageClass(load(schema_id, text, ()).message(name))


def framed(schema_id: int, message: Any) -> bytes:
    """``message`` as confluent-kafka's ProtobufSerializer frames it (its SchemaId)."""
    indexes = _create_index_array(message.DESCRIPTOR)
    return SchemaId("PROTOBUF", schema_id, None, indexes).id_to_bytes() + (
        message.SerializeToString()
    )


def column(reader_id: int, schemas: dict[int, str], name: str | None = None) -> ProtobufColumn:
    reader = ReaderSchema(reader_id, schemas[reader_id], "PROTOBUF")
    return ProtobufColumn(reader, Schemas(schemas), name)  # type: ignore[arg-type]


def test_types_map_as_spark_from_protobuf_maps_them() -> None:
    shape = message_shape(load(1, ORDER_V1, ()).message(None))
    assert ddl_type(shape.arrow) == (
        "struct<`id`:bigint,`amount`:double,`at`:timestamp,`status`:string,"
        "`tags`:array<string>,`counts`:map<string,int>,`card`:string,`iban`:string,"
        "`ship_to`:struct<`city`:string>,`qty`:int,`took`:interval day to second,`rank`:int>"
    )


def test_every_kind_of_value_decodes_and_unset_fields_are_null() -> None:
    order = message_class(1, ORDER_V1)
    full = order(id=7, amount=2.5, status=1, tags=["a", "b"], counts={"x": 3}, iban="DE00",
                 ship_to={"city": "Oslo"}, qty=4_000_000_000, rank=0)  # fmt: skip
    full.at.FromDatetime(AT)
    full.took.FromMicroseconds(90_000_001)
    decoded, bad = column(1, {1: ORDER_V1}).decode([framed(1, full), framed(1, order()), None])
    assert bad == []
    first, empty, null = decoded.to_pylist()
    assert first == {
        "id": 7, "amount": 2.5, "at": AT, "status": "PAID", "tags": ["a", "b"],
        "counts": [("x", 3)], "card": None, "iban": "DE00", "ship_to": {"city": "Oslo"},
        # uint32 keeps its bits in an int, as Spark's from_protobuf does
        "qty": 4_000_000_000 - 2**32, "took": dt.timedelta(seconds=90, microseconds=1),
        "rank": 0,  # proto3 optional: set, so 0, not null
    }  # fmt: skip
    # an empty message: proto3 fields at their default are not set, so null, as in Spark
    assert set(empty.values()) == {None}
    assert null is None


def test_message_indexes_name_a_nested_or_later_message() -> None:
    assert message_indexes(b"\x00", 0) == ((0,), 1)  # count 0: the first message
    assert message_indexes(bytes([4, 2, 0]), 0) == ((1, 0), 3)  # zigzag: 2 indexes, 1 and 0
    with pytest.raises(ValueError, match="do not parse"):
        message_indexes(bytes([4, 2]), 0)
    refund = message_class(1, ORDER_V1, "shop.Refund")
    col = column(1, {1: ORDER_V1}, "shop.Refund")
    decoded, bad = col.decode([framed(1, refund(order_id=9))])
    assert (bad, decoded.to_pylist()) == ([], [{"order_id": 9}])
    # a record of another message than the reader's is bad, never read as the wrong one
    _, bad = column(1, {1: ORDER_V1}).decode([framed(1, refund(order_id=9))])
    assert "names message shop.Refund, the reader schema's is shop.Order" in bad[0].reason


def test_an_older_and_a_newer_writer_schema_read_with_the_reader_message() -> None:
    col = column(2, {1: ORDER_V1, 2: ORDER_V2, 3: ORDER_V2})
    old = message_class(1, ORDER_V1)(id=1)
    new = message_class(3, ORDER_V2)(id=2, note="gift")
    decoded, bad = col.decode([framed(1, old), framed(3, new), framed(1, old)])
    assert bad == []
    assert [(r["id"], r["note"]) for r in decoded.to_pylist()] == [
        (1, None),
        (2, "gift"),
        (1, None),
    ]
    # the reader schema's newer field is unknown to a V1 reader: dropped, as Protobuf drops it
    v1_reader = column(1, {1: ORDER_V1, 3: ORDER_V2})
    decoded, bad = v1_reader.decode([framed(3, new)])
    assert bad == [] and "note" not in decoded.to_pylist()[0]
    assert col.registry.asked == [(1, "serialized"), (3, "serialized")]  # type: ignore[attr-defined]


def test_each_kind_of_bad_record_is_named_with_its_schema_id() -> None:
    col = column(1, {1: ORDER_V1, 4: ORDER_BAD})
    good = framed(1, message_class(1, ORDER_V1)(id=1, amount=1.5))
    changed = framed(4, message_class(4, ORDER_BAD)(id=1, amount="1.5"))
    decoded, bad = col.decode(
        [b"plain text", framed(9, message_class(1, ORDER_V1)(id=1)), changed, good[:-3], good]
    )
    assert decoded.null_count == 4 and decoded.to_pylist()[4]["amount"] == 1.5
    assert [(b.row, b.schema_id) for b in bad] == [(0, None), (1, 9), (2, 4), (3, 1)]
    assert "Confluent header" in bad[0].reason
    assert "no schema with id 9" in bad[1].reason
    assert "field 2 (shop.Order.amount) is string in the writer schema and double" in bad[2].reason
    assert "do not parse as shop.Order" in bad[3].reason


def test_the_base64_descriptor_confluent_kafka_registers_is_read_as_the_text() -> None:
    text_form = load(1, ORDER_V1, ()).message(None)
    proto = message_class(1, ORDER_V1).DESCRIPTOR.file.serialized_pb
    serialized = base64.standard_b64encode(proto).decode("ascii")
    assert ddl_type(message_shape(load(2, serialized, ()).message(None)).arrow) == ddl_type(
        message_shape(text_form).arrow
    )


def test_imports_come_from_the_references_by_name() -> None:
    common = 'syntax = "proto3"; package common; message Money { int64 cents = 1; }'
    text = (
        'syntax = "proto3"; package shop; import "common/money.proto";'
        " message Price { common.Money money = 1; }"
    )
    schema = load(5, text, (("common/money.proto", common),))
    assert ddl_type(message_shape(schema.message("Price")).arrow) == (
        "struct<`money`:struct<`cents`:bigint>>"
    )
    with pytest.raises(ProtobufSchemaError, match=r"common/money\.proto"):
        load(6, text, ())


def test_a_recursive_message_an_unknown_name_and_bad_text_are_refused() -> None:
    tree = 'syntax = "proto3"; message Node { repeated Node children = 1; }'
    with pytest.raises(ProtobufTypeError, match="Node -> Node is recursive"):
        message_shape(load(1, tree, ()).message(None))
    with pytest.raises(ProtobufSchemaError, match=r"no message 'Nope'.*Order, Refund"):
        load(2, ORDER_V1, ()).message("Nope")
    with pytest.raises(ProtobufSchemaError, match=r"protoc cannot compile it: .*schema-3\.proto"):
        load(3, "syntax = 'proto3'; message {", ())


def test_unknown_enum_numbers_are_named_as_protobuf_java_names_them() -> None:
    open_enum = message_class(1, ORDER_V1)(status=1)
    data = bytearray(framed(1, open_enum))
    data[-1] = 7  # status = 7: no such value in the reader's enum
    decoded, bad = column(1, {1: ORDER_V1}).decode([bytes(data)])
    assert bad == [] and decoded.to_pylist()[0]["status"] == "UNKNOWN_ENUM_VALUE_Status_7"


def test_the_column_fits_arrow_as_spark_reads_it() -> None:
    col = column(1, {1: ORDER_V1})
    assert col.arrow_type == pa.struct(list(col.arrow_type))  # a struct Spark maps field by field
    assert col.arrow_type.field("took").type == pa.duration("us")
