"""Records a source cannot decode, kept in the dead-letter table (``deadLetter.table``).

The driver makes the table when the query starts (:func:`ensure_table`); each reading task
appends its bad records in one commit before it ends (:func:`write`), so they are in the
table before the batch's offsets are committed. A retried task writes only the records the
table does not hold yet (by topic, partition and offset).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_groups.deadletter import DEAD_LETTER_COLUMNS, ERROR_COLUMN
from spark_groups.errors import OptionError
from spark_groups.storage import delta

log = logging.getLogger(__name__)

#: The dead-letter table of the ``kafka-group`` source: :data:`DEAD_LETTER_COLUMNS`, then the
#: schema id in the record's header (null without one) and the consumer group.
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field(ERROR_COLUMN, pa.string()),
        pa.field("schemaId", pa.int32()),
        pa.field("group", pa.string()),
    ]
)
#: The dead-letter table of the ``kafka-share`` source: :data:`DEAD_LETTER_COLUMNS`, then how
#: often the broker had delivered the record, the share group, and the schema id (records on
#: their last delivery have none; last, so a table made before it had the column takes it).
SHARE_SCHEMA = pa.schema(
    [*(SCHEMA.field(n) for n in DEAD_LETTER_COLUMNS), pa.field("deliveryCount", pa.int32()),
     SCHEMA.field("group"), SCHEMA.field("schemaId")]
)  # fmt: skip
assert tuple(SCHEMA.names[: len(DEAD_LETTER_COLUMNS)]) == DEAD_LETTER_COLUMNS
#: Nullable columns a dead-letter table made by an earlier version may lack: added to it.
_ADDED_LATER = ("schemaId",)


def ensure_table(
    path: str,
    storage_options: Mapping[str, str] | None = None,
    schema: pa.Schema = SCHEMA,
    source: str = "kafka-group",
) -> None:
    """Make ``source``'s dead-letter table (columns ``schema``) at ``path`` when there is
    none; an existing one must have those columns (a column added in a later version is
    added to it, in a metadata-only commit)."""
    if delta.open_table(path, storage_options) is None:
        lost_race = delta.create_table(
            path, schema, description=f"{source} dead letters", storage_options=storage_options
        )
        if lost_race is None:
            log.info("dead-letter table %s: created", path)
    table = delta.open_table(path, storage_options)
    found = set(table.schema().to_arrow().names) if table is not None else set()
    later = [f for f in schema if f.name in _ADDED_LATER and f.name not in found]
    if table is not None and later and set(schema.names) - found == {f.name for f in later}:
        delta.add_columns(table, later)
        log.info("dead-letter table %s: added the columns %s", path, [f.name for f in later])
        found |= {f.name for f in later}
    if not set(schema.names) <= found:
        raise OptionError(
            "deadLetter.table",
            f"{path} is not a {source} dead-letter table: it lacks the columns "
            f"{sorted(set(schema.names) - found)}; name a new path (it is made) or that table",
        )


def write(
    path: str,
    rows: Sequence[Mapping[str, Any]],
    storage_options: Mapping[str, str] | None = None,
    schema: pa.Schema = SCHEMA,
) -> int:
    """Append the dead letters ``rows`` (dicts of ``schema``'s columns) that the table does
    not hold yet (by topic, partition and offset); returns how many were appended."""
    if not rows:
        return 0
    table = pa.Table.from_pylist(list(rows), schema=schema)
    held = _held(path, table, storage_options)
    if held:
        keep = [(r["topic"], r["partition"], r["offset"]) not in held for r in rows]
        table = table.filter(pa.array(keep))
    if table.num_rows:
        delta.append(path, table, storage_options)
    return table.num_rows


def _held(
    path: str, table: pa.Table, storage_options: Mapping[str, str] | None
) -> set[tuple[str, int, int]]:
    """The (topic, partition, offset) of ``table``'s rows the dead-letter table has."""
    existing = delta.open_table(path, storage_options)
    if existing is None or existing.version() == 0:
        return set()
    import pyarrow.dataset as ds

    offsets = table.column("offset")
    found = existing.to_pyarrow_dataset().to_table(
        columns=["topic", "partition", "offset"],
        filter=(ds.field("offset") >= pc.min(offsets)) & (ds.field("offset") <= pc.max(offsets)),
    )
    return set(
        zip(*(found.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True)
    )
