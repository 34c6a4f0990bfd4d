"""Avro columns decoded in C (``spark_groups.formats._avro``), where it is built and the
schemas compile (:mod:`avro_program`); :class:`AvroColumn` falls back to fastavro otherwise.

One :class:`NativeAvro` per column decoder: the reader's :class:`~avro_program.Layout`, and
one program per writer schema id, compiled the first time a batch holds that id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from spark_groups.formats.avro_program import ERROR_BASE, REASONS, Layout, Unsupported
from spark_groups.formats.column_values import MAX_REASON, BadRecord, no_header
from spark_groups.formats.wire import HEADER_BYTES

log = logging.getLogger(__name__)

try:
    from spark_groups.formats import _avro  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: fastavro decodes
    _avro = None

#: A writer schema as :class:`AvroColumn` keeps it: (parsed writer, reader) or why not.
Writer = tuple[Any, Any] | str


class NativeAvro:
    """Decodes one column in C: the reader's layout, the writer schemas' programs."""

    def __init__(self, layout: Layout, reader_id: int) -> None:
        self.layout = layout
        self.reader_id = reader_id
        self._ids: dict[int, int] = {}
        self._programs: list[bytes] = []
        self._unsupported: set[int] = set()

    @classmethod
    def of(cls, reader: Any, raw: pa.DataType, reader_id: int) -> NativeAvro | None:
        """The C decoder of the reader schema ``reader`` (raw Arrow type ``raw``), or None
        when it is not built here or does not take that schema."""
        if _avro is None:
            return None
        try:
            return cls(Layout(reader, raw), reader_id)
        except Unsupported as exc:
            log.info("Avro reader schema id %d decoded by fastavro: %s", reader_id, exc)
            return None

    def decode(
        self,
        values: Sequence[bytes | None],
        writer: Callable[[int], Writer],
    ) -> tuple[pa.Array, list[BadRecord]] | None:
        """The raw column of ``values`` and its bad records, or None when a writer schema of
        the batch does not compile (fastavro decodes that batch). ``writer`` gives a writer
        schema by id (fetched from the registry once)."""
        assert _avro is not None
        values = values if isinstance(values, list) else list(values)
        ids = _avro.schema_ids(values)
        for schema_id in ids - self._ids.keys() - self._unsupported:
            self._compile(schema_id, writer(schema_id))
        if ids & self._unsupported:
            return None
        layout = self.layout
        columns, failed = _avro.decode(
            layout.kinds, tuple(self._programs), self._ids, layout.null_program,
            tuple(layout.tables.enums), tuple(layout.tables.consts), values,
        )  # fmt: skip
        bad = [self._bad(row, code, values[row]) for row, code in failed]
        return layout.assemble(columns), bad

    def _compile(self, schema_id: int, writer: Writer) -> None:
        if isinstance(writer, str):
            program = self.layout.error_program(writer)
        else:
            why = (
                f"its writer schema (id {schema_id}) cannot be resolved to the reader schema "
                f"(id {self.reader_id}): "
            )
            try:
                program = self.layout.program(writer[0], why)
            except Unsupported as exc:
                log.info("Avro writer schema id %d decoded by fastavro: %s", schema_id, exc)
                self._unsupported.add(schema_id)
                return
        self._ids[schema_id] = len(self._programs)
        self._programs.append(program)

    def _bad(self, row: int, code: int, data: bytes | None) -> BadRecord:
        assert data is not None
        if code == 1:
            return BadRecord(row, None, no_header(data))
        schema_id = int.from_bytes(data[1:HEADER_BYTES], "big")
        if code >= ERROR_BASE:
            reason = self.layout.tables.errors[code - ERROR_BASE]
        else:
            reason = REASONS.get(code, f"reason {code}")
        return BadRecord(row, schema_id, reason[:MAX_REASON])
