"""A read batch's ``key`` and ``value`` decoded, and the records that cannot be, split off.

A :class:`DecodePlan` is made on the driver when the query starts (the reader schemas fixed
then) and pickled to the executors; each worker turns it into one :class:`Decoding` per task.
A record either column cannot decode is, with ``deadLetter.table``, left out of the batch and
appended to that table when the task's ranges are read (:meth:`Decoding.finish`), before the
batch can commit; without it, the task fails at that record with a
:class:`~spark_groups.errors.RecordDecodeError`.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from spark_groups.errors import OptionError, RecordDecodeError
from spark_groups.formats import bad_records
from spark_groups.formats.avro_decode import AvroColumn
from spark_groups.formats.avro_types import AvroSchemaError
from spark_groups.formats.column_values import BadRecord
from spark_groups.formats.json_decode import JsonColumn
from spark_groups.formats.json_types import JsonSchemaError
from spark_groups.formats.protobuf_schema import ProtobufSchemaError
from spark_groups.formats.protobuf_types import ProtobufTypeError
from spark_groups.formats.registry import ReaderSchema, Registry, registry_for
from spark_groups.options.formats import ColumnFormat, FormatOptions

log = logging.getLogger(__name__)

#: The registry's name of each format's schemas' type.
_KINDS = {
    "avro-confluent": "AVRO",
    "protobuf-confluent": "PROTOBUF",
    "json-schema-confluent": "JSON",
}


class ColumnDecoder(Protocol):
    """One column's decoder (:class:`AvroColumn`, :class:`ProtobufColumn`,
    :class:`JsonColumn`)."""

    arrow_type: pa.DataType

    def decode(self, values: Any) -> tuple[pa.Array, list[BadRecord]]:
        """The column of ``values`` and the rows that could not be decoded."""
        ...


@dataclass(frozen=True)
class DecodePlan:
    """How a source's tasks decode: its format options, the reader schema of each decoded
    column (``readers``: column name -> schema), the group (for the dead letters) and the
    ``storage.*`` options of the dead-letter table. Picklable; secrets stay out of repr."""

    formats: FormatOptions
    readers: Mapping[str, ReaderSchema]
    group: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def row_schema(self, base: pa.Schema) -> pa.Schema:
        """``base`` (the source's undecoded row schema) with the decoded columns' types,
        and ``rawKey``/``rawValue`` with ``includeRawBytes``."""
        fields = list(base)
        for column in self.formats.decoded:
            i = base.get_field_index(column.column)
            fields[i] = pa.field(column.column, self.decoder(column).arrow_type)
        if self.formats.include_raw:
            fields += [pa.field(_raw_name(c), pa.binary()) for c in self.formats.decoded]
        return pa.schema(fields)

    def decoding(self) -> Decoding:
        """A :class:`Decoding` for one task, its columns shared by the process's tasks."""
        return Decoding(self, {c.column: self.decoder(c) for c in self.formats.decoded})

    def decoder(self, column: ColumnFormat) -> ColumnDecoder:
        """``column``'s decoder, made once per process and kept for its tasks."""
        reader = self.readers[column.column]
        key = (
            column.format, reader.schema_id, reader.text, column.record_name,
            *sorted(self.formats.registry.items()),
        )  # fmt: skip
        found = _columns.get(key)
        if found is None:
            registry = registry_for(self.formats.registry, self.formats.registry_timeout_ms)
            found = _columns[key] = column_decoder(column, reader, registry)
        return found


def column_decoder(column: ColumnFormat, reader: ReaderSchema, registry: Registry) -> ColumnDecoder:
    """The decoder of ``column`` to its ``reader`` schema, writer schemas from ``registry``;
    raises the format's schema error when the reader schema has no Spark type."""
    if column.format == "avro-confluent":
        return AvroColumn(reader, registry)
    if column.format == "protobuf-confluent":
        from spark_groups.formats.protobuf_decode import ProtobufColumn

        if importlib.util.find_spec("google.protobuf") is None:
            raise OptionError(
                f"{column.column}.format",
                "protobuf-confluent needs protobuf, which is not installed here: "
                "pip install 'spark-groups[protobuf]'",
            )
        return ProtobufColumn(reader, registry, column.record_name)
    return JsonColumn(reader, registry)


_columns: dict[tuple[Any, ...], ColumnDecoder] = {}
#: Columns of a source's batch a dead letter keeps where the batch has them (kafka-share's).
_KEPT_IF_THERE = ("deliveryCount",)


class DecodedSource(Protocol):
    """What :func:`plan_decoding` reads of a source's options (``SourceOptions``,
    ``ShareOptions``)."""

    @property
    def formats(self) -> FormatOptions: ...
    @property
    def topics(self) -> tuple[str, ...]: ...
    @property
    def group_id(self) -> str: ...
    @property
    def storage_options(self) -> Mapping[str, str]: ...


def plan_decoding(
    options: DecodedSource,
    dead_letter_schema: pa.Schema = bad_records.SCHEMA,
    source: str = "kafka-group",
) -> DecodePlan | None:
    """The :class:`DecodePlan` of a source (None when nothing is decoded): each decoded
    column's reader schema fetched from the registry now, checked to have a Spark type, and
    the dead-letter table (of ``source``, columns ``dead_letter_schema``) made. Raises
    :class:`~spark_groups.errors.SchemaRegistryError` (naming the URL) when the registry
    cannot say, without waiting for it."""
    formats = options.formats
    if not formats.decoded:
        return None
    registry = registry_for(formats.registry, 0)  # at the start: no waiting for the registry
    readers: dict[str, ReaderSchema] = {}
    for column in formats.decoded:
        reader = registry.reader_schema(column, options.topics)
        kind = _KINDS[column.format]
        if reader.schema_type.upper() != kind:
            raise OptionError(
                f"{column.column}.format",
                f"the reader schema (id {reader.schema_id}, subject {reader.subject}) is a "
                f"{reader.schema_type} schema, not {kind}: set {column.column}.format to match",
            )
        readers[column.column] = reader
        log.info(
            "%s: %s, reader schema id %d (subject %s, version %s) from %s",
            column.column, column.format, reader.schema_id, reader.subject, reader.version,
            registry.url,
        )  # fmt: skip
    plan = DecodePlan(formats, readers, options.group_id, options.storage_options)
    for column in formats.decoded:
        reader = readers[column.column]
        try:
            plan.decoder(column)  # made once here, kept for row_schema() and the tasks
        except (AvroSchemaError, JsonSchemaError, ProtobufSchemaError, ProtobufTypeError) as exc:
            raise OptionError(
                f"{column.column}.format",
                f"the reader schema (id {reader.schema_id}, subject {reader.subject}) has no "
                f"Spark type: {exc}",
            ) from None
    if formats.dead_letter_table is not None:
        bad_records.ensure_table(
            formats.dead_letter_table, options.storage_options, dead_letter_schema, source
        )
    return plan


class Decoding:
    """Decodes one task's batches (:meth:`decode`) and keeps its bad records until
    :meth:`finish` (with a dead-letter table)."""

    def __init__(self, plan: DecodePlan, columns: Mapping[str, ColumnDecoder]) -> None:
        self.plan = plan
        self.columns = columns
        self.dead_letters: list[dict[str, Any]] = []

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its key and value decoded, without the records that could not be
        (kept for :meth:`finish`); raises :class:`RecordDecodeError` at the first such record
        without a dead-letter table."""
        names = list(batch.schema.names)
        arrays = list(batch.columns)
        raw: list[pa.Array] = []
        bad: dict[int, list[tuple[str, BadRecord]]] = {}
        for name, column in self.columns.items():
            i = names.index(name)
            decoded, failed = column.decode(arrays[i].to_pylist())
            raw.append(arrays[i])
            arrays[i] = decoded
            for b in failed:
                bad.setdefault(b.row, []).append((name, b))
        if self.plan.formats.include_raw:
            arrays += raw
            names += [_raw_name(c) for c in self.plan.formats.decoded]
        out = pa.RecordBatch.from_arrays(arrays, names=names)
        if not bad:
            return out
        if self.plan.formats.dead_letter_table is None:
            row = min(bad)
            name, first = bad[row][0]
            raise RecordDecodeError(
                batch.column("topic")[row].as_py(),
                batch.column("partition")[row].as_py(),
                batch.column("offset")[row].as_py(),
                name,
                first.schema_id,
                first.reason,
            )
        self._keep(batch, bad)
        keep = [True] * batch.num_rows
        for row in bad:
            keep[row] = False
        return out.filter(pa.array(keep))

    def _keep(self, batch: pa.RecordBatch, bad: Mapping[int, list[tuple[str, BadRecord]]]) -> None:
        names = [n for n in _KEPT_IF_THERE if n in batch.schema.names]

        def extra(row: int) -> dict[str, Any]:
            return {n: batch.column(n)[row].as_py() for n in names}

        for row, failures in sorted(bad.items()):
            error = "; ".join(f"{column}: {b.reason}" for column, b in failures)
            ids = [b.schema_id for _, b in failures if b.schema_id is not None]
            self.dead_letters.append(
                {
                    "topic": batch.column("topic")[row].as_py(),
                    "partition": batch.column("partition")[row].as_py(),
                    "offset": batch.column("offset")[row].as_py(),
                    "timestamp": batch.column("timestamp")[row].as_py(),
                    "key": batch.column("key")[row].as_py(),
                    "value": batch.column("value")[row].as_py(),
                    "dead_letter_error": error,
                    "schemaId": ids[0] if ids else None,
                    "group": self.plan.group,
                    **extra(row),
                }
            )

    def finish(self) -> None:
        """Append the task's bad records to the dead-letter table (one commit), once every
        range is read: before the task ends, so before its batch can commit."""
        path = self.plan.formats.dead_letter_table
        if not self.dead_letters or path is None:
            return
        written = bad_records.write(path, self.dead_letters, self.plan.storage_options)
        log.warning(
            "%d record(s) could not be decoded and went to the dead-letter table %s (%d "
            "already there), e.g. %s-%s@%s",
            len(self.dead_letters), path, len(self.dead_letters) - written,
            self.dead_letters[0]["topic"], self.dead_letters[0]["partition"],
            self.dead_letters[0]["offset"],
        )  # fmt: skip
        self.dead_letters = []


def _raw_name(column: ColumnFormat) -> str:
    return "rawKey" if column.column == "key" else "rawValue"
