"""The sink table's upkeep beside its batches: the defaults of a new table, checkpoints and
log clean-up off the commit path, compaction every N versions, the once-told costs of an
existing table's properties (local disk, no Spark, no broker)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_groups.offsets import TopicPartition
from spark_groups.options.sink import parse_sink_options
from spark_groups.sink import upkeep as upkeep_module
from spark_groups.sink.group_commit import DeltaSink, committed_positions
from spark_groups.sink.upkeep import DEFAULT_COMPACT_EVERY, TABLE_DEFAULTS, TableUpkeep

from sink_support import SCHEMA, TOPIC, plan, rows, write_task
from support.broker import wait_until

PARTITIONS = [TopicPartition(TOPIC, p) for p in range(2)]


def commit_batches(table: Path, batches: range, sink: DeltaSink | None = None) -> list[int]:
    """Commit one batch of 10 records per partition for each batch id; the versions."""
    sink = sink or DeltaSink(str(table), "g", member="m")
    versions = []
    for b in batches:
        span = range(b * 10, b * 10 + 10)
        files = [f for p in range(2) for f in write_task(table, [rows(p, span)])]
        result = sink.commit(plan(b, {p: (b * 10, b * 10 + 10) for p in range(2)}), files, SCHEMA)
        assert result.version is not None
        versions.append(result.version)
    return versions


def log_files(table: Path) -> list[str]:
    return sorted(p.name for p in (table / "_delta_log").iterdir())


def test_a_new_table_gets_the_defaults_and_batch_commits_write_no_checkpoint(tmp_path: Path):
    table = tmp_path / "t"
    commit_batches(table, range(3))
    dt = DeltaTable(str(table))
    assert dt.metadata().configuration == TABLE_DEFAULTS
    dt.alter.set_table_properties({"delta.checkpointInterval": "2"})
    commit_batches(table, range(3, 8))  # versions 5..9: 6 and 8 are multiples of 2
    assert not [n for n in log_files(table) if "checkpoint" in n]  # the commits made none
    assert parse_sink_options({"checkpointLocation": "cp"}).compact_every == DEFAULT_COMPACT_EVERY


def test_the_upkeep_checkpoints_and_deletes_expired_log_entries_keeping_positions(
    tmp_path: Path,
):
    table = tmp_path / "t"
    commit_batches(table, range(12))  # versions 1..12
    DeltaTable(str(table)).alter.set_table_properties({"delta.checkpointInterval": "5"})
    upkeep = TableUpkeep(str(table), None, "m", compact_every=0)
    first = commit_batches(table, range(12, 14))[-1]  # 15
    upkeep.after_commit(first)
    assert upkeep.wait_idle(60) and upkeep.counts["checkpoints"] == 1
    # Every log entry so far is two hours old: past the table's hour of log retention.
    old = time.time() - 2 * 3600
    for name in log_files(table):
        os.utime(table / "_delta_log" / name, (old, old))
    positions = committed_positions(str(table), "g", PARTITIONS)

    version = commit_batches(table, range(14, 19))[-1]  # 20
    assert first == 15 and version == 20
    upkeep.after_commit(version)
    assert upkeep.wait_idle(60)

    assert upkeep.counts["checkpoints"] == 2 and upkeep.counts["failures"] == 0
    # Entries before the expired checkpoint are deleted; from it on, each version is
    # loadable (Delta's rule), and the new checkpoint is written.
    left = [n for n in log_files(table) if n.endswith(".json")]
    assert left == [f"{v:020d}.json" for v in range(first, version + 1)]
    assert f"{version:020d}.checkpoint.parquet" in log_files(table)
    after = committed_positions(str(table), "g", PARTITIONS)
    assert after == {tp: positions[tp] + 50 for tp in PARTITIONS}
    # A replay of a batch the table holds is still dropped: the transaction ids survived.
    replay = DeltaSink(str(table), "g", member="m").commit(
        plan(3, {p: (30, 40) for p in range(2)}),
        [f for p in range(2) for f in write_task(table, [rows(p, range(30, 40))])],
        SCHEMA,
    )
    assert replay.version is None and set(replay.dropped) == set(PARTITIONS)


def test_compaction_every_n_versions_keeps_the_rows_and_positions(tmp_path: Path) -> None:
    table = tmp_path / "t"
    versions = commit_batches(table, range(9))
    upkeep = TableUpkeep(str(table), None, "m", compact_every=10)
    for v in versions:
        upkeep.after_commit(v)
    assert upkeep.wait_idle(60) and upkeep.counts["compactions"] == 0
    version = commit_batches(table, range(9, 10))[-1]
    assert version == 10
    upkeep.after_commit(version)
    assert upkeep.wait_idle(60)

    assert upkeep.counts["compactions"] == 1 and upkeep.counts["vacuums"] == 1
    dt = DeltaTable(str(table))
    assert len(dt.file_uris()) == 1
    assert sorted(dt.to_pyarrow_table()["offset"].to_pylist()) == sorted(
        o for o in range(100) for _ in range(2)
    )
    assert committed_positions(str(table), "g", PARTITIONS) == {tp: 100 for tp in PARTITIONS}


def test_a_compaction_due_is_not_lost_to_a_later_version(tmp_path: Path, monkeypatch) -> None:
    table = tmp_path / "t"
    versions = commit_batches(table, range(4))  # versions 1..4
    started, go = threading.Event(), threading.Event()
    real_run = TableUpkeep._run

    def slow_run(self: TableUpkeep, version: int, compact: bool) -> None:
        started.set()
        assert go.wait(30)
        real_run(self, version, compact)

    monkeypatch.setattr(TableUpkeep, "_run", slow_run)
    upkeep = TableUpkeep(str(table), None, "m", compact_every=2)
    upkeep.after_commit(versions[0])  # 1: busy from here
    assert started.wait(30)
    upkeep.after_commit(versions[1])  # 2: compaction due while the thread works
    upkeep.after_commit(versions[2])  # 3 replaces 2 as the pending version
    go.set()  # after_commit returned every time while the thread was held
    assert upkeep.wait_idle(60)
    assert upkeep.counts["compactions"] == 1


def test_an_existing_tables_properties_are_kept_and_their_cost_told_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "t"
    commit_batches(table, range(5))
    dt = DeltaTable(str(table))
    # As a table made by another engine: Delta's defaults, i.e. the properties unset.
    dt.alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 30 days",
         "delta.deletedFileRetentionDuration": "interval 1 weeks"}
    )  # fmt: skip
    versions = commit_batches(table, range(5, 8))
    upkeep = TableUpkeep(str(table), None, "m", compact_every=0)
    with caplog.at_level(logging.WARNING, logger=upkeep_module.__name__):
        for v in versions:
            upkeep.after_commit(v)
            assert upkeep.wait_idle(60)
    told = [
        r.getMessage()
        for r in caplog.records
        if r.name == upkeep_module.__name__ and r.levelno == logging.WARNING
    ]
    assert len(told) == 2, told  # once per property, in the first run only
    assert "delta.logRetentionDuration is 'interval 30 days'" in told[0]
    assert "commit files in _delta_log" in told[0]
    assert "delta.deletedFileRetentionDuration is 'interval 1 weeks'" in told[1]
    config = DeltaTable(str(table)).metadata().configuration
    assert config["delta.logRetentionDuration"] == "interval 30 days"  # left as it was


def test_vacuum_of_a_new_table_keeps_an_hour_while_members_may_run(tmp_path: Path) -> None:
    from spark_groups.sink.live_maintenance import MIN_RETAIN_HOURS_BESIDE_MEMBERS, vacuum_table

    table = tmp_path / "t"
    commit_batches(table, range(2))
    beside = vacuum_table(str(table), None, "test")  # the table keeps removed files 15 minutes
    assert beside.retention_hours == MIN_RETAIN_HOURS_BESIDE_MEMBERS
    stopped = vacuum_table(str(table), None, "test", members_stopped=True)
    assert stopped.retention_hours == 0.25


def test_the_files_a_compaction_removed_are_vacuumed_once_their_retention_ends(
    tmp_path: Path,
) -> None:
    """A checkpoint drops the tombstones that expired; the upkeep's vacuum reads those of the
    snapshot from before the checkpoint, so the first compaction's removed files are deleted
    at the second (a snapshot loaded after it finds none of them: they would stay forever)."""
    table = tmp_path / "t"
    commit_batches(table, range(5))
    retention_s = 5.0
    DeltaTable(str(table)).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": f"interval {retention_s:g} seconds"}
    )
    upkeep = TableUpkeep(str(table), None, "m", compact_every=1)  # at every version it is given
    upkeep.after_commit(commit_batches(table, range(5, 6))[-1])
    assert upkeep.wait_idle(60) and upkeep.counts["compactions"] == 1
    removed_at = time.time()
    first_removed = {Path(u).name for u in _data_files(table)} - _live(table)
    assert len(first_removed) == 12  # the six batches' files, two each
    deadline = removed_at + retention_s + 0.5
    wait_until(lambda: time.time() > deadline, retention_s + 5, "their retention to end")
    upkeep.after_commit(commit_batches(table, range(6, 11))[-1])
    assert upkeep.wait_idle(60) and upkeep.counts["compactions"] == 2
    assert upkeep.counts["failures"] == 0
    on_disk = {Path(u).name for u in _data_files(table)}
    assert not first_removed & on_disk, "the first compaction's removed files are still there"
    assert _live(table) <= on_disk
    assert sorted(DeltaTable(str(table)).to_pyarrow_table()["offset"].to_pylist()) == sorted(
        o for o in range(110) for _ in range(2)
    )


def _data_files(table: Path) -> list[str]:
    return [str(p) for p in table.rglob("*.parquet") if "_delta_log" not in p.parts]


def _live(table: Path) -> set[str]:
    return {Path(u).name for u in DeltaTable(str(table)).file_uris()}
