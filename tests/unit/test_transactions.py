"""The app transactions of a Delta table from one replay of its log
(spark_groups.storage.transactions), against delta-rs' own answer per id."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from spark_groups.storage import transactions
from spark_groups.storage.transactions import (
    RETENTION_PROPERTY,
    LatestTransactions,
    transaction_versions,
)

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


def test_ids_with_json_escapes_are_read_as_delta_rs_reads_them(tmp_path: Path) -> None:
    """Most txn lines are read without the JSON parser; one whose id needs escapes is not."""
    odd = ['group "a"', "back\\slash", "plain:1"]
    make_table(tmp_path)
    commit(tmp_path, {a: i for i, a in enumerate(odd, 1)})
    commit(tmp_path, {odd[0]: 9})
    table = DeltaTable(str(tmp_path))
    found = transaction_versions(table, odd)
    assert transactions._maps, "the answer came from a map"
    assert found == {odd[0]: 9, odd[1]: 2, odd[2]: 3}
    assert found == {a: table.transaction_version(a) for a in odd}


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


def test_the_newest_transactions_follow_new_commits_a_new_table_and_new_metadata(
    tmp_path: Path,
) -> None:
    newest = LatestTransactions(str(tmp_path))
    assert newest.latest() is None
    make_table(tmp_path)
    grow(tmp_path, 7, checkpoint_at=(3,))
    for more in range(3):  # commits by others between two looks
        found = newest.latest()
        table = DeltaTable(str(tmp_path))
        assert found is not None and found.version == table.version()
        assert found.table_id == str(table.metadata().id)
        assert found.of(IDS) == delta_rs(table) and found.replayed is not None
        grow(tmp_path, 2 + more, start=100 + 10 * more)
    shutil.rmtree(tmp_path)  # made again at the same path, with as many commits as before
    make_table(tmp_path)
    grow(tmp_path, found.version, start=500)
    table = DeltaTable(str(tmp_path))
    found = newest.latest()
    assert found is not None and found.table_id == str(table.metadata().id)
    assert found.of(IDS) == delta_rs(table)
    DeltaTable(str(tmp_path)).alter.set_table_properties({RETENTION_PROPERTY: "interval 1 days"})
    grow(tmp_path, 2, start=900)
    found = newest.latest()
    table = DeltaTable(str(tmp_path))
    assert found is not None and found.replayed is None, "delta-rs answers: they expire"
    assert found.version == table.version() and found.of(IDS) == delta_rs(table)
