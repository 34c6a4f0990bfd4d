"""Avro records in Confluent's wire format decoded into one Arrow column.

Each record names its writer schema by id; fastavro reads it with that schema and resolves it
to the reader schema (Avro's resolution rules: fields the reader lacks skipped, fields the
writer lacks filled from their defaults, promotions such as int to long). A record that
cannot be read is a :class:`BadRecord`, never a null.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from spark_groups.formats.avro_native import NativeAvro
from spark_groups.formats.avro_types import AvroSchemaError, avro_shape, parse
from spark_groups.formats.column_values import MAX_REASON, BadRecord, framed, to_arrow
from spark_groups.formats.registry import ReaderSchema, Registry
from spark_groups.formats.wire import HEADER_BYTES


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
        # fastavro names the record of a union of several records only where asked (and
        # asking costs every record a tenth of its time): where the reader schema has one.
        self._options: dict[str, Any] = (
            {"return_record_name": True, "return_record_name_override": True}
            if shape.shape is not None
            else {}
        )
        # schema id -> (writer schema, reader schema or None when they are the same) or why
        # that id cannot be read.
        self._writers: dict[int, tuple[Any, Any] | str] = {reader.schema_id: (shape.schema, None)}
        self._native = NativeAvro.of(shape.schema, shape.raw, reader.schema_id)

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Array, list[BadRecord]]:
        """The column of ``values`` (null stays null) and the rows that could not be decoded
        (null in the column): in C where :class:`NativeAvro` compiles the schemas, else with
        fastavro (the same values)."""
        if self._native is not None:
            decoded = self._native.decode(values, self._writer)
            if decoded is not None:
                raw, failed = decoded
                column = raw if raw.type == self.arrow_type else raw.cast(self.arrow_type)
                return column, failed
        import fastavro

        read = fastavro.schemaless_reader
        writers, options = self._writers, self._options
        out: list[Any] = []
        bad: list[BadRecord] = []
        append = out.append
        for row, data, schema_id in framed(values, out, bad):
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
                append(read(buffer, writer[0], writer[1], **options))
            except Exception as exc:  # the bytes do not parse with their writer schema
                append(None)
                bad.append(BadRecord(row, schema_id, _reason(exc, schema_id, self.reader)))
        return self._to_arrow(out, bad), bad

    def _writer(self, schema_id: int) -> tuple[Any, Any] | str:
        """The writer schema ``schema_id`` (and the reader schema to resolve to), or why
        records of that id cannot be decoded; kept for the life of the process."""
        kept = self._writers.get(schema_id)
        if kept is not None:
            return kept
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
        if self._shape is not None:
            shape = self._shape
            out = [None if v is None else shape(v) for v in out]
        return to_arrow(out, bad, self._raw_type, self.arrow_type)


def _reason(exc: BaseException, schema_id: int, reader: ReaderSchema) -> str:
    what = type(exc).__name__
    if what == "SchemaResolutionError":
        text = (
            f"its writer schema (id {schema_id}) cannot be resolved to the reader schema "
            f"(id {reader.schema_id}): {exc}"
        )
    else:
        text = f"its bytes do not parse as Avro with its writer schema: {what}: {exc}"
    return text[:MAX_REASON]
