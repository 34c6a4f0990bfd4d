"""JSON Schema records in Confluent's wire format decoded into one Arrow column.

JSON is read by name, whatever the writer schema: a property the reader schema lacks is
dropped, one it has and the record lacks is null. The writer schema's id must be a JSON
schema the registry has; the values must fit the column's types (Arrow checks each), but the
schema's other constraints (``required``, patterns, ranges) are not validated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from spark_groups.formats.column_values import MAX_REASON, BadRecord, framed, to_arrow
from spark_groups.formats.json_types import json_shape
from spark_groups.formats.registry import ReaderSchema, Registry
from spark_groups.formats.wire import HEADER_BYTES


class JsonColumn:
    """Decodes one column's values to the reader schema ``reader``; writer ids are checked
    with ``registry`` once each."""

    def __init__(self, reader: ReaderSchema, registry: Registry) -> None:
        self.reader = reader
        self.registry = registry
        shape = json_shape(reader.text)
        self.arrow_type: pa.DataType = shape.arrow
        self._shape = shape.shape
        # schema id -> None (a JSON schema) or why records of that id cannot be read
        self._writers: dict[int, str | None] = {reader.schema_id: None}

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Array, list[BadRecord]]:
        """The column of ``values`` (null stays null) and the rows that could not be decoded."""
        loads, shape, writers = json.loads, self._shape, self._writers
        out: list[Any] = []
        bad: list[BadRecord] = []
        for row, data, schema_id in framed(values, out, bad):
            why = writers[schema_id] if schema_id in writers else self._writer(schema_id)
            if why is not None:
                out.append(None)
                bad.append(BadRecord(row, schema_id, why))
                continue
            try:
                value = loads(memoryview(data)[HEADER_BYTES:].tobytes())
            except ValueError as exc:
                out.append(None)
                reason = f"its bytes are not JSON: {exc}"[:MAX_REASON]
                bad.append(BadRecord(row, schema_id, reason))
                continue
            out.append(value if shape is None else shape(value))
        return to_arrow(out, bad, self.arrow_type, self.arrow_type), bad

    def _writer(self, schema_id: int) -> str | None:
        found = self.registry.by_id(schema_id)
        why: str | None = None
        if found is None:
            why = f"the schema registry at {self.registry.url} has no schema with id {schema_id}"
        elif found.schema_type.upper() != "JSON":
            why = f"schema id {schema_id} is a {found.schema_type} schema, not JSON Schema"
        self._writers[schema_id] = why
        return why
