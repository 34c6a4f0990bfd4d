"""Avro records in Confluent's wire format decoded into one Arrow column.

Each record names its writer schema by id; fastavro reads it with that schema and resolves it
to the reader schema (Avro's resolution rules: fields the reader lacks skipped, fields the
writer lacks filled from their defaults, promotions such as int to long). A record that
cannot be read is a :class:`BadRecord`, never a null.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_groups.formats.avro_types import AvroSchemaError, avro_shape, parse
from spark_groups.formats.registry import ReaderSchema, Registry
from spark_groups.formats.wire import HEADER_BYTES, MAGIC

_MAX_REASON = 500


@dataclass(frozen=True)
class BadRecord:
    """Row ``row`` of the batch could not be decoded: the schema id of its header (None
    without one) and why."""

    row: int
    schema_id: int | None
    reason: str


class AvroColumn:
    """Decodes one column's values to the reader schema ``reader``; writer schemas come from
    ``registry`` by id, each parsed once."""

    def __init__(self, reader: ReaderSchema, registry: Registry) -> None:
        self.reader = reader
        self.registry = registry
        shape = avro_shape(reader.text, reader.references)
        self.arrow_type: pa.DataType = shape.arrow
        self._raw_type = shape.raw
        self._shape = shape.shape
        self._reader_schema = shape.schema
        # schema id -> (writer schema, reader schema or None when they are the same) or why
        # that id cannot be read.
        self._writers: dict[int, tuple[Any, Any] | str] = {reader.schema_id: (shape.schema, None)}

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Array, list[BadRecord]]:
        """The column of ``values`` (null stays null) and the rows that could not be decoded
        (null in the column)."""
        import fastavro

        read = fastavro.schemaless_reader
        writers = self._writers
        out: list[Any] = []
        bad: list[BadRecord] = []
        append = out.append
        for row, data in enumerate(values):
            if data is None:
                append(None)
                continue
            if len(data) < HEADER_BYTES or data[0] != MAGIC:
                append(None)
                bad.append(BadRecord(row, None, _no_header(data)))
                continue
            schema_id = int.from_bytes(data[1:HEADER_BYTES], "big")
            writer = writers.get(schema_id)
            if writer is None:
                writer = self._writer(schema_id)
            if isinstance(writer, str):
                append(None)
                bad.append(BadRecord(row, schema_id, writer))
                continue
            buffer = io.BytesIO(data)
            buffer.seek(HEADER_BYTES)
            try:
                append(read(buffer, writer[0], writer[1], return_record_name=True,
                            return_record_name_override=True))  # fmt: skip
            except Exception as exc:  # the bytes do not parse with their writer schema
                append(None)
                bad.append(BadRecord(row, schema_id, _reason(exc, schema_id, self.reader)))
        return self._to_arrow(out, bad), bad

    def _writer(self, schema_id: int) -> tuple[Any, Any] | str:
        """The writer schema ``schema_id`` (and the reader schema to resolve to), or why
        records of that id cannot be decoded; kept for the life of the process."""
        found = self.registry.by_id(schema_id)
        entry: tuple[Any, Any] | str
        if found is None:
            entry = f"the schema registry at {self.registry.url} has no schema with id {schema_id}"
        elif found.schema_type.upper() != "AVRO":
            entry = f"schema id {schema_id} is a {found.schema_type} schema, not Avro"
        else:
            try:
                entry = (parse(found.text, found.references), self._reader_schema)
            except AvroSchemaError as exc:
                entry = f"schema id {schema_id}: {exc}"
        self._writers[schema_id] = entry
        return entry

    def _to_arrow(self, out: list[Any], bad: list[BadRecord]) -> pa.Array:
        """``out`` as the column's Arrow type; a value that does not fit becomes bad."""
        if self._shape is not None:
            shape = self._shape
            out = [None if v is None else shape(v) for v in out]
        try:
            raw = pa.array(out, self._raw_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            for row, value in enumerate(out):
                try:
                    pa.array([value], self._raw_type)
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    out[row] = None
                    bad.append(BadRecord(row, None, f"does not fit the reader schema: {exc}"))
            bad.sort(key=lambda b: b.row)
            raw = pa.array(out, self._raw_type)
        return raw if raw.type == self.arrow_type else raw.cast(self.arrow_type)


def _no_header(data: bytes) -> str:
    first = f"0x{data[0]:02x}" if data else "nothing"
    return (
        "it does not start with the Confluent header (magic byte 0x00, then a 4-byte schema "
        f"id): it starts with {first} ({len(data)} bytes); not written by a schema-registry "
        "serializer"
    )


def _reason(exc: BaseException, schema_id: int, reader: ReaderSchema) -> str:
    what = type(exc).__name__
    if what == "SchemaResolutionError":
        text = (
            f"its writer schema (id {schema_id}) cannot be resolved to the reader schema "
            f"(id {reader.schema_id}): {exc}"
        )
    else:
        text = f"its bytes do not parse as Avro with its writer schema: {what}: {exc}"
    return text[:_MAX_REASON]
