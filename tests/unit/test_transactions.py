"""The app transactions of a Delta table from one replay of its log
(spark_groups.storage.transactions), against delta-rs' own answer per id."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from spark_groups.storage import transactions
from spark_groups.storage.transactions import RETENTION_PROPERTY, transaction_versions

IDS = [f"app-{i}" for i in range(12)]


def commit(path: Path, txns: dict[str, int]) -> None:
    table = DeltaTable(str(path))
    table.create_write_transaction(
        [],
        "append",
        table.schema(),
        commit_properties=CommitProperties(
            app_transactions=[Transaction(a, v) for a, v in txns.items()]
        ),
    )


def make_table(path: Path, configuration: dict[str, str] | None = None) -> None:
    write_deltalake(str(path), pa.table({"a": [1]}), configuration=configuration)


def delta_rs(table: DeltaTable) -> dict[str, int]:
    """delta-rs' answer, one call per id."""
    found = {a: table.transaction_version(a) for a in IDS}
    return {a: int(v) for a, v in found.items() if v is not None}


def grow(path: Path, commits: int, start: int = 0, checkpoint_at: tuple[int, ...] = ()) -> None:
    """``commits`` commits, each moving three of the ids (some again), checkpoints between."""
    for i in range(start, start + commits):
        commit(path, {IDS[(i * 5) % 12]: i, IDS[(i * 7 + 1) % 12]: 1000 + i, IDS[i % 3]: 2 * i})
        if i in checkpoint_at:
            DeltaTable(str(path)).create_checkpoint()


@pytest.fixture(autouse=True)
def fresh_maps() -> None:
    transactions._maps.clear()


def test_every_version_agrees_with_delta_rs_forward_and_back(tmp_path: Path) -> None:
    make_table(tmp_path)
    assert transaction_versions(DeltaTable(str(tmp_path)), IDS) == {}
    grow(tmp_path, 25, checkpoint_at=(6, 15))
    newest = DeltaTable(str(tmp_path)).version()
    # Forward one version at a time (the map brought forward), then back (loaded again).
    for version in [*range(newest + 1), 3, 20, 9]:
        table = DeltaTable(str(tmp_path), version=version)
        assert transaction_versions(table, IDS) == delta_rs(table), f"version {version}"
        assert transactions._maps, "the answer came from a map"
    assert transaction_versions(table, ["app-0", "never"]) == {
        k: v for k, v in delta_rs(table).items() if k == "app-0"
    }


def test_a_table_made_again_at_the_same_path_is_read_anew(tmp_path: Path) -> None:
    make_table(tmp_path)
    grow(tmp_path, 8)
    before = DeltaTable(str(tmp_path))
    assert transaction_versions(before, IDS) == delta_rs(before)
    shutil.rmtree(tmp_path)
    make_table(tmp_path)
    grow(tmp_path, 12, start=50)  # further than the old table's version: no graft
    after = DeltaTable(str(tmp_path))
    assert after.version() > before.version()
    assert transaction_versions(after, IDS) == delta_rs(after)


def test_transactions_that_expire_are_left_to_delta_rs(tmp_path: Path) -> None:
    make_table(tmp_path, {RETENTION_PROPERTY: "interval 1 days"})
    grow(tmp_path, 5)
    table = DeltaTable(str(tmp_path))
    assert transaction_versions(table, IDS) == delta_rs(table)
    assert not transactions._maps


def test_a_multi_part_checkpoint_is_left_to_delta_rs(tmp_path: Path) -> None:
    make_table(tmp_path)
    grow(tmp_path, 10, checkpoint_at=(5,))
    log = tmp_path / "_delta_log"
    (log / "_last_checkpoint").unlink()
    single = next(log.glob("*.checkpoint.parquet"))
    single.rename(log / single.name.replace(".parquet", ".0000000001.0000000001.parquet"))
    table = DeltaTable(str(tmp_path))
    assert delta_rs(table), "delta-rs reads the one-part checkpoint"
    assert transaction_versions(table, IDS) == delta_rs(table)
    assert all(m.unreplayable for m in transactions._maps.values())
