"""LatestSnapshot: a table kept open and brought up to date, never grafted onto a replaced log."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from spark_groups.storage.snapshots import LatestSnapshot

ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


def test_it_follows_other_writers_commits(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    snapshot = LatestSnapshot(path)
    with snapshot.latest() as table:
        assert table is None  # no table yet
    write_deltalake(path, ROWS)
    with snapshot.latest() as table:
        assert table is not None and table.version() == 0
        kept = table
    for _ in range(3):
        write_deltalake(path, ROWS, mode="append")  # another writer
    with snapshot.latest() as table:
        assert table is kept  # updated in place, not loaded again
        assert table.version() == 3 and table.count() == 8


def test_a_table_made_again_at_the_same_path_is_loaded_anew(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, ROWS)
    write_deltalake(path, ROWS, mode="append")
    snapshot = LatestSnapshot(path)
    with snapshot.latest() as table:
        assert table is not None and table.version() == 1
        old_id = table.metadata().id
    shutil.rmtree(path)  # replaced by a table with more versions: version 1 exists again
    write_deltalake(path, pa.table({"id": pa.array([7], pa.int64())}))
    for _ in range(3):
        write_deltalake(path, pa.table({"id": pa.array([7], pa.int64())}), mode="append")
    with snapshot.latest() as table:
        assert table is not None
        assert table.metadata().id == DeltaTable(path).metadata().id != old_id
        assert table.version() == 3 and table.count() == 4
