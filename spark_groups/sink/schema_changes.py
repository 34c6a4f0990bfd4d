"""How the query's columns may differ from the sink table's, and the change each needs.

With ``mergeSchema=true`` a batch may add nullable columns and fields: a new top-level column
(added with Delta's ``ALTER TABLE ADD COLUMNS``), or a new field in a struct, also in a list's
or a map's values (a record format's reader schema that grew; the table's schema merged in a
metadata-only commit). Any other difference (a changed type, a field the query lacks, a NOT
NULL table column the query cannot guarantee) fails the batch with a
:class:`~spark_groups.errors.SinkError`. docs/sink.md, "The table".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_groups.errors import SinkError

if TYPE_CHECKING:
    from deltalake import DeltaTable


@dataclass(frozen=True)
class SchemaChange:
    """What a batch's columns need of the table: new top-level columns (deltalake
    ``Field``\\ s, nullable) and the names of columns whose nested fields grew."""

    added: tuple[Any, ...] = ()
    grown: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.grown)


def schema_change(
    table: DeltaTable, schema: pa.Schema, merge_schema: bool, path: str
) -> SchemaChange:
    """The change the query's ``schema`` needs of ``table`` (the sink's at ``path``)."""
    from deltalake import Field, Schema

    existing = {f["name"]: f for f in json.loads(table.schema().to_json())["fields"]}
    query = Schema.from_arrow(schema)
    query_fields = {f["name"]: f for f in json.loads(query.to_json())["fields"]}
    added, grown = [], []
    for field_ in query.fields:
        mine = query_fields[field_.name]
        theirs = existing.get(field_.name)
        if theirs is None:
            if not merge_schema:
                raise SinkError(
                    f"sink {path}: the query has a column {field_.name!r} that the table "
                    "does not; set the sink option mergeSchema=true to add it (as nullable)"
                )
            added.append(Field(field_.name, field_.type, nullable=True))
            continue
        if mine["type"] != theirs["type"]:
            if not _grows(theirs["type"], mine["type"]):
                raise SinkError(
                    f"sink {path}: column {field_.name!r} is "
                    f"{json.dumps(theirs['type'])} in the table and {json.dumps(mine['type'])} "
                    "in the query; only new nullable columns and struct fields can be added"
                )
            if not merge_schema:
                raise SinkError(
                    f"sink {path}: column {field_.name!r} has new struct fields in the query "
                    f"({json.dumps(mine['type'])}, the table has {json.dumps(theirs['type'])}); "
                    "set the sink option mergeSchema=true to add them (as nullable)"
                )
            grown.append(field_.name)
        if mine["nullable"] and not theirs["nullable"]:
            raise SinkError(
                f"sink {path}: column {field_.name!r} is NOT NULL in the table but "
                "nullable in the query"
            )
    for name, theirs in existing.items():
        if name not in query_fields and not theirs["nullable"]:
            raise SinkError(
                f"sink {path}: the query has no column {name!r}, which is NOT NULL in the table"
            )
    return SchemaChange(tuple(added), tuple(grown))


def _grows(theirs: Any, mine: Any) -> bool:
    """Whether the Delta type ``mine`` is ``theirs`` with nullable struct fields added (at
    the end of a struct, at any depth)."""
    if theirs == mine:
        return True
    if not (isinstance(theirs, dict) and isinstance(mine, dict)):
        return False
    kind = theirs.get("type")
    if kind != mine.get("type"):
        return False
    if kind == "struct":
        old, new = theirs["fields"], mine["fields"]
        if [f["name"] for f in new[: len(old)]] != [f["name"] for f in old]:
            return False
        return all(
            _grows(a["type"], b["type"]) and a["nullable"] >= b["nullable"]
            for a, b in zip(old, new, strict=False)
        ) and all(f["nullable"] for f in new[len(old) :])
    if kind == "array":
        return _grows(theirs["elementType"], mine["elementType"])
    if kind == "map":
        return theirs["keyType"] == mine["keyType"] and _grows(
            theirs["valueType"], mine["valueType"]
        )
    return False
