"""Protobuf records in Confluent's wire format decoded into one Arrow column.

After the magic byte and the schema id, a record carries its message indexes (a count, then
each index, zigzag varints; a count of 0 means ``[0]``), which name the writer's message in
the writer schema. The bytes are parsed with the reader schema's message: Protobuf's own
evolution (fields the reader lacks are unknown fields, dropped; fields the writer lacks are
unset, so null). What Protobuf would misread silently is caught first, once per writer schema
and message: a writer message of another name, or a field number whose type changed to one
of another wire encoding. Such a record, or one that does not parse, is a
:class:`BadRecord`, never a null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from spark_groups.formats.column_values import MAX_REASON, BadRecord, framed, to_arrow
from spark_groups.formats.protobuf_schema import ProtobufSchemaError, load
from spark_groups.formats.protobuf_types import is_repeated, message_shape
from spark_groups.formats.registry import ReaderSchema, Registry
from spark_groups.formats.wire import HEADER_BYTES

#: What a reader field may be read from, by the writer field's type: the types of one wire
#: encoding that Protobuf reads as each other (FieldDescriptor.TYPE_* numbers).
_VARINT = frozenset({3, 4, 5, 8, 13, 14})  # int64 uint64 int32 bool uint32 enum
_ENCODINGS = (_VARINT, frozenset({17, 18}), frozenset({7, 15}), frozenset({6, 16}),
              frozenset({9, 12}), frozenset({1}), frozenset({2}), frozenset({11}),
              frozenset({10}))  # fmt: skip
_TYPE_NAMES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
    8: "bool", 9: "string", 10: "group", 11: "message", 12: "bytes", 13: "uint32", 14: "enum",
    15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
}  # fmt: skip


class ProtobufColumn:
    """Decodes one column's values to the reader schema's message (``record.name``, or its
    first); writer schemas come from ``registry`` by id, each checked once."""

    def __init__(self, reader: ReaderSchema, registry: Registry, message: str | None) -> None:
        from google.protobuf.message_factory import GetMessageClass

        self.reader = reader
        self.registry = registry
        descriptor = load(reader.schema_id, reader.text, reader.references).message(message)
        shape = message_shape(descriptor)
        self.arrow_type: pa.DataType = shape.arrow
        self._raw_type = shape.raw
        self._convert = shape.convert
        self._descriptor = descriptor
        self._message_class = GetMessageClass(descriptor)
        # (schema id, message indexes) -> None (read with the reader's message) or why not
        self._writers: dict[tuple[int, tuple[int, ...]], str | None] = {}

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Array, list[BadRecord]]:
        """The column of ``values`` (null stays null) and the rows that could not be decoded."""
        from google.protobuf.message import DecodeError

        parse, convert, writers = self._message_class.FromString, self._convert, self._writers
        out: list[Any] = []
        bad: list[BadRecord] = []
        for row, data, schema_id in framed(values, out, bad):
            try:
                indexes, start = message_indexes(data, HEADER_BYTES)
            except ValueError as exc:
                out.append(None)
                bad.append(BadRecord(row, schema_id, str(exc)))
                continue
            key = (schema_id, indexes)
            why = writers[key] if key in writers else self._writer(schema_id, indexes)
            if why is not None:
                out.append(None)
                bad.append(BadRecord(row, schema_id, why))
                continue
            try:
                out.append(convert(parse(memoryview(data)[start:])))
            except DecodeError as exc:
                out.append(None)
                reason = f"its bytes do not parse as {self._descriptor.full_name}: {exc}"
                bad.append(BadRecord(row, schema_id, reason[:MAX_REASON]))
        return to_arrow(out, bad, self._raw_type, self.arrow_type), bad

    def _writer(self, schema_id: int, indexes: tuple[int, ...]) -> str | None:
        """Why records of ``schema_id`` naming the message at ``indexes`` cannot be read with
        the reader's message (None: they can); kept for the life of the process."""
        why: str | None
        found = self.registry.by_id(schema_id, "serialized")
        if found is None:
            why = f"the schema registry at {self.registry.url} has no schema with id {schema_id}"
        elif found.schema_type.upper() != "PROTOBUF":
            why = f"schema id {schema_id} is a {found.schema_type} schema, not Protobuf"
        else:
            try:
                writer = load(schema_id, found.text, found.references).by_indexes(indexes)
                why = incompatibility(writer, self._descriptor)
            except ProtobufSchemaError as exc:
                why = f"schema id {schema_id}: {exc}"
            if why is not None:
                why = (
                    f"its writer schema (id {schema_id}) cannot be read with the reader schema "
                    f"(id {self.reader.schema_id}): {why}"
                )[:MAX_REASON]
        self._writers[(schema_id, indexes)] = why
        return why


def message_indexes(data: bytes, start: int) -> tuple[tuple[int, ...], int]:
    """The message indexes of a record from ``start`` and where its message begins;
    ``ValueError`` when they do not parse."""
    position = start
    values: list[int] = []
    count = -1
    while count < 0 or len(values) < count:
        value = shift = 0
        while True:
            if position >= len(data) or shift > 63:
                raise ValueError("its message indexes (after the schema id) do not parse")
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        value = (value >> 1) ^ -(value & 1)  # zigzag
        if count < 0:
            if not 0 <= value <= 64:
                raise ValueError(f"its message index count {value} is not a count of indexes")
            count = value
        else:
            values.append(value)
    return (tuple(values) or (0,)), position


def incompatibility(writer: Any, reader: Any) -> str | None:
    """Why messages written as ``writer`` would be misread as ``reader`` (None: they would
    not): another message name, or a field number whose type changed its wire encoding."""
    return _incompatibility(writer, reader, set())


def _incompatibility(writer: Any, reader: Any, seen: set[tuple[str, str]]) -> str | None:
    if writer.full_name != reader.full_name:
        return f"it names message {writer.full_name}, the reader schema's is {reader.full_name}"
    if (writer.full_name, reader.full_name) in seen:
        return None
    seen.add((writer.full_name, reader.full_name))
    for fd in reader.fields:
        theirs = writer.fields_by_number.get(fd.number)
        if theirs is None:
            continue
        where = f"field {fd.number} ({reader.full_name}.{fd.name})"
        if not any(fd.type in e and theirs.type in e for e in _ENCODINGS):
            return (
                f"{where} is {_TYPE_NAMES[theirs.type]} in the writer schema and "
                f"{_TYPE_NAMES[fd.type]} in the reader's"
            )
        if is_repeated(fd) != is_repeated(theirs):
            return f"{where} is repeated in one schema and not in the other"
        if fd.type in (10, 11):
            nested = _incompatibility(theirs.message_type, fd.message_type, seen)
            if nested is not None:
                return nested
    return None
