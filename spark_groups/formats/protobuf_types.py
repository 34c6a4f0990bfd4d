"""A Protobuf message as an Arrow type, mapped as Spark's ``from_protobuf`` maps it (with its
default options) to Spark types, and the function that turns a parsed message into the
value that fills it.

==========================================  ==============================================
Protobuf                                    Arrow (Spark)
==========================================  ==============================================
int32, sint32, sfixed32, uint32, fixed32    int32 (int; the unsigned ones' bits, as Spark)
int64, sint64, sfixed64, uint64, fixed64    int64 (bigint; likewise)
float, double, bool, string, bytes          float32, float64, bool, string, binary
enum                                        string (the value's name)
google.protobuf.Timestamp                   timestamp us UTC (timestamp)
google.protobuf.Duration                    duration us (interval day to second)
message (wrappers and Any too)              struct, fields in declaration order
repeated T                                  list<T>
map<K, V>                                   map<K, V>
oneof                                       its fields, each nullable, one set
==========================================  ==============================================

As in ``from_protobuf``, a field that is not set is null: proto3's implicit-presence fields
holding their default (0, "", an empty list or map) too. A recursive message has no Spark
type (Spark refuses it unless told a depth).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

Convert = Callable[[Any], Any]

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
# FieldDescriptor.TYPE_* numbers (descriptor.proto), to keep protobuf out of import time.
_DOUBLE, _FLOAT, _INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _BOOL = 1, 2, 3, 4, 5, 6, 7, 8
_STRING, _GROUP, _MESSAGE, _BYTES, _UINT32, _ENUM = 9, 10, 11, 12, 13, 14
_SFIXED32, _SFIXED64, _SINT32, _SINT64 = 15, 16, 17, 18
_SCALARS = {
    _DOUBLE: pa.float64(), _FLOAT: pa.float32(), _INT64: pa.int64(), _UINT64: pa.int64(),
    _INT32: pa.int32(), _FIXED64: pa.int64(), _FIXED32: pa.int32(), _BOOL: pa.bool_(),
    _STRING: pa.string(), _BYTES: pa.binary(), _UINT32: pa.int32(), _SFIXED32: pa.int32(),
    _SFIXED64: pa.int64(), _SINT32: pa.int32(), _SINT64: pa.int64(), _ENUM: pa.string(),
}  # fmt: skip
#: Unsigned types and their width: Spark keeps their bits in a signed int or bigint.
_UNSIGNED = {_UINT32: 32, _FIXED32: 32, _UINT64: 64, _FIXED64: 64}


class ProtobufTypeError(ValueError):
    """The message has no Spark type (it is recursive)."""


@dataclass(frozen=True)
class ProtobufShape:
    """What decoding to one message needs: ``raw`` (the Arrow type :attr:`convert`'s values
    fill: times as their microseconds), ``arrow`` (the column's type, ``raw`` cast) and
    ``convert`` (a parsed message to a dict of its set fields)."""

    raw: pa.DataType
    arrow: pa.DataType
    convert: Convert


def message_shape(message: Any) -> ProtobufShape:
    """The :class:`ProtobufShape` of the message descriptor ``message``."""
    raw, arrow, convert = _message(message, ())
    return ProtobufShape(raw, arrow, convert)


def _message(message: Any, path: tuple[str, ...]) -> tuple[pa.DataType, pa.DataType, Convert]:
    if message.full_name in path:
        chain = " -> ".join((*path, message.full_name))
        raise ProtobufTypeError(f"{chain} is recursive: Spark has no type for it")
    inner = (*path, message.full_name)
    raw_fields, fields = [], []
    converts: dict[str, Convert | None] = {}
    for fd in message.fields:
        raw, arrow, convert = _field(fd, inner)
        raw_fields.append(pa.field(fd.name, raw))
        fields.append(pa.field(fd.name, arrow))
        converts[fd.name] = convert

    def convert_message(value: Any) -> dict[str, Any]:
        out = {}
        for fd, field_value in value.ListFields():
            if fd.is_extension:
                continue
            each = converts[fd.name]
            out[fd.name] = field_value if each is None else each(field_value)
        return out

    return pa.struct(raw_fields), pa.struct(fields), convert_message


def _field(fd: Any, path: tuple[str, ...]) -> tuple[pa.DataType, pa.DataType, Convert | None]:
    """A field's raw and Arrow types and the conversion of its value (None: as it is)."""
    if fd.type in (_MESSAGE, _GROUP) and fd.message_type.GetOptions().map_entry:
        key = fd.message_type.fields_by_name["key"]
        item = fd.message_type.fields_by_name["value"]
        key_raw, key_arrow, key_convert = _single(key, path)
        raw, arrow, convert = _single(item, path)

        def convert_map(value: Any) -> list[tuple[Any, Any]]:
            return [
                (k if key_convert is None else key_convert(k), v if convert is None else convert(v))
                for k, v in value.items()
            ]

        return pa.map_(key_raw, raw), pa.map_(key_arrow, arrow), convert_map
    raw, arrow, convert = _single(fd, path)
    if is_repeated(fd):
        if convert is None:
            return pa.list_(raw), pa.list_(arrow), list
        each = convert
        return pa.list_(raw), pa.list_(arrow), lambda values: [each(v) for v in values]
    return raw, arrow, convert


def _single(fd: Any, path: tuple[str, ...]) -> tuple[pa.DataType, pa.DataType, Convert | None]:
    """One value of a field (an item of a repeated one)."""
    if fd.type in (_MESSAGE, _GROUP):
        name = fd.message_type.full_name
        if name == _TIMESTAMP:
            return pa.int64(), pa.timestamp("us", tz="UTC"), _micros
        if name == _DURATION:
            return pa.int64(), pa.duration("us"), _micros
        return _message(fd.message_type, path)
    if fd.type == _ENUM:
        return pa.string(), pa.string(), _enum_name(fd.enum_type)
    arrow = _SCALARS[fd.type]
    bits = _UNSIGNED.get(fd.type)
    return arrow, arrow, None if bits is None else _signed(bits)


def is_repeated(fd: Any) -> bool:
    """Whether the field descriptor ``fd`` is repeated (a map's too)."""
    repeated = getattr(fd, "is_repeated", None)  # protobuf 6+; `label` before
    return bool(repeated) if repeated is not None else fd.label == 3


def _micros(value: Any) -> int:
    return int(value.seconds) * 1_000_000 + int(value.nanos) // 1000


def _enum_name(enum: Any) -> Convert:
    names = {v.number: v.name for v in enum.values}

    def name(number: int) -> str:
        found = names.get(number)
        # an open enum's unknown number, named as protobuf-java names it for Spark
        return found if found is not None else f"UNKNOWN_ENUM_VALUE_{enum.name}_{number}"

    return name


def _signed(bits: int) -> Convert:
    top, wrap = 1 << (bits - 1), 1 << bits

    def signed(value: int) -> int:
        return value - wrap if value >= top else value

    return signed
