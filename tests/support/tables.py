"""What landed in a Delta table, as the tests read it back (delta-rs, no Spark)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder


def table_ids(table: Path | str, storage_options: Mapping[str, str] | None = None) -> list[int]:
    """Every id in the newest version of the table (duplicates kept), via delta-rs."""
    dt = DeltaTable(str(table), storage_options=storage_options)
    reader = QueryBuilder().register("t", dt).execute("SELECT id FROM t")
    return pa.table(reader.read_all()).column("id").to_pylist()
