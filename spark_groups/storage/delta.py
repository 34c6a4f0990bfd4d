"""Opening, creating, appending to and querying Delta tables (delta-rs), for every table kept.

The offsets ledger, the rebalance history and the sink's table all go through here. Creating
a table is a race when several writers start at once: :func:`create_table` never retries its
commit, so a writer that loses fails (instead of being rebased into a second CREATE TABLE on
top of the winner's) and then *adopts* the winner's table by opening it. Every ``uri`` may be
any path a user writes; it is handed to delta-rs as
:func:`spark_groups.storage.files.table_uri` resolves it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_groups.storage.files import local_path, table_uri

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

#: How many times :func:`open_table` tries to load a table before an error propagates.
OPEN_ATTEMPTS = 3

#: jemalloc settings for delta-rs (its wheel links jemalloc, configured by this environment
#: variable when the library loads) in the long-lived driver processes spark_groups runs in:
#: 2 arenas instead of 4 per core, and freed pages handed back at once (docs/operations.md,
#: "Memory").
ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
ALLOCATOR_CONF = "narenas:2,dirty_decay_ms:0,muzzy_decay_ms:0"


def bound_allocator() -> None:
    """Set delta-rs' allocator up for a long-lived process, before it loads: the reader
    process (the group member and ledger writer) and the sink's commit process. Does nothing
    once delta-rs is loaded (the settings are read then) or when the user set
    ``_RJEM_MALLOC_CONF``."""
    if "deltalake" not in sys.modules:
        os.environ.setdefault(ALLOCATOR_ENV, ALLOCATOR_CONF)


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """The Delta table at ``uri`` at its newest version, or None when there is none.

    Other errors are tried again (:data:`OPEN_ATTEMPTS` times in all) before they propagate:
    a load lists the log, and a listing made while another writer's commit appears can see
    a later commit file without an earlier one (delta-rs: "Expected contiguous commit files,
    but found gap")."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    options = dict(storage_options) if storage_options else None
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        try:
            return DeltaTable(table_uri(uri), storage_options=options)
        except TableNotFoundError:
            return None
        except Exception as exc:
            if attempt == OPEN_ATTEMPTS:
                raise
            log.debug("opening %s failed (try %d), trying again: %s", uri, attempt, exc)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    description: str,
    storage_options: Mapping[str, str] | None = None,
    partition_by: Sequence[str] = (),
    name: str | None = None,
    configuration: Mapping[str, str] | None = None,
) -> Exception | None:
    """Create the table at ``uri`` (a local directory is made first); return None when this
    call created it, or the error when it did not (most likely another writer created it
    first: open it and check it is the table wanted)."""
    from deltalake import CommitProperties, DeltaTable

    extra: dict[str, Any] = {}
    if name is not None:
        extra["name"] = name
    if configuration is not None:
        # delta-rs accepts a non-``delta.*`` key only this way.
        extra.update(configuration=dict(configuration), raise_if_key_not_exists=False)
    try:
        local = local_path(uri)
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        DeltaTable.create(
            table_uri(uri),
            schema,
            mode="error",
            partition_by=list(partition_by) or None,
            description=description,
            storage_options=dict(storage_options) if storage_options else None,
            # Losing a creation race must fail (and adopt the winner's table), not be
            # rebased into a second CREATE TABLE on top of it.
            commit_properties=CommitProperties(max_commit_retries=0),
            **extra,
        )
    except Exception as exc:
        return exc
    return None


def append(uri: str, data: pa.Table, storage_options: Mapping[str, str] | None = None) -> None:
    """Append ``data`` to the table at ``uri`` in one commit (creating the table if missing)."""
    from deltalake import write_deltalake

    local = local_path(uri)
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
    write_deltalake(
        table_uri(uri),
        data,
        mode="append",
        storage_options=dict(storage_options) if storage_options else None,
    )


def add_columns(table: DeltaTable, fields: Sequence[pa.Field]) -> None:
    """Add the nullable ``fields`` to ``table``'s schema (a metadata-only commit); a column
    another writer added meanwhile is left as it is."""
    from deltalake.schema import Field

    have = set(table.schema().to_arrow().names)
    missing = [Field.from_arrow(f) for f in fields if f.name not in have]
    if missing:
        table.alter.add_columns(missing)


def query(table: DeltaTable, name: str, sql: str) -> pa.Table:
    """Run ``sql`` against ``table`` registered as ``name`` (delta-rs' DataFusion)."""
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register(name, table).execute(sql).read_all())


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal (for :func:`query` and delete predicates)."""
    return "'" + value.replace("'", "''") + "'"


def sql_timestamp(value: datetime) -> str:
    """The timezone-aware ``value`` as a SQL literal of a ``timestamp[us, UTC]`` column."""
    return f"arrow_cast('{value.isoformat()}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
