"""Compaction and vacuum of a delta-group sink table (``spark-groups optimize`` / ``vacuum``)
on local disk: transaction ids kept, the maintenance lease, vacuum's limits, the CLI.
Beside running members and on S3: tests/integration/test_sink_maintenance_s3.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from spark_groups.errors import MaintenanceError, MaintenanceRunningError, OptionError
from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.sink.group_commit import app_id
from spark_groups.sink.live_maintenance import (
    _set_lease,
    lease_id,
    optimize,
    release_lease,
    take_lease,
    vacuum_table,
)
from spark_groups.tools.cli import main

GROUP = "g"
TOPIC = "orders"
PARTITIONS = [TopicPartition(TOPIC, p) for p in range(3)]
#: The environment without the settings that make S3 commits safe.
NO_S3_ENV: dict[str, str | None] = {
    k: None
    for k in ("AWS_CONDITIONAL_PUT", "AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME")
}


def sink_like_table(path: Path, commits: int, rows: int = 10) -> None:
    """A table written the way the sink writes it: one commit per batch adding one file and
    setting the transaction version of its Kafka partition (``batch % 3``)."""
    write_deltalake(str(path), pa.table({"id": pa.array([], pa.int64())}), mode="append")
    table_id = DeltaTable(str(path)).metadata().id
    for i in range(commits):
        tp = PARTITIONS[i % 3]
        write_deltalake(
            str(path),
            pa.table({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())}),
            mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id(table_id, GROUP, tp), (i + 1) * rows)]
            ),
        )


def ids(path: Path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_dataset().to_table().column("id").to_pylist())


def positions(path: Path) -> dict[TopicPartition, int]:
    return committed_positions(str(path), GROUP, PARTITIONS)


def test_optimize_compacts_and_keeps_rows_and_transaction_ids_also_after_log_cleanup(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t"
    sink_like_table(table, 12)
    # Expired log entries are deleted: the positions must then come from the checkpoint.
    DeltaTable(str(table)).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds"}
    )
    before_ids, before_positions = ids(table), positions(table)
    assert before_positions == {PARTITIONS[0]: 100, PARTITIONS[1]: 110, PARTITIONS[2]: 120}

    result = CliRunner().invoke(main, ["optimize", str(table), "--target-size", "64MB"])

    assert result.exit_code == 0, result.output
    assert "12 file(s) compacted into 1" in result.output
    assert ids(table) == before_ids
    assert positions(table) == before_positions
    assert len(DeltaTable(str(table)).file_uris()) == 1
    first_json = sorted((table / "_delta_log").glob("*.json"))[0]
    assert first_json.name != f"{0:020d}.json", "the expired log entries were not cleaned up"
    assert list((table / "_delta_log").glob("*.checkpoint.parquet"))


def test_of_two_runs_taking_the_lease_at_once_exactly_one_commits(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink_like_table(table, 2)
    seen = [DeltaTable(str(table)) for _ in range(2)]  # both saw the same version
    _set_lease(seen[0], 10**15, "a", "taken")
    with pytest.raises(CommitFailedError):
        _set_lease(seen[1], 10**15 + 1, "b", "taken")
    assert DeltaTable(str(table)).transaction_version(lease_id(seen[0])) == 10**15


def test_a_live_lease_refuses_another_run_until_released_or_taken_over(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink_like_table(table, 3)
    until = take_lease(str(table), None, "optimize:ops@host-a")

    with pytest.raises(MaintenanceRunningError) as refused:
        optimize(str(table), None, "optimize:ops@host-b")
    assert refused.value.holder == "optimize:ops@host-a"
    assert refused.value.expires == until / 1000
    assert refused.value.path == str(table)
    assert len(DeltaTable(str(table)).file_uris()) == 3  # nothing compacted

    release_lease(str(table), None, "optimize:ops@host-a", until)
    assert optimize(str(table), None, "optimize:ops@host-b").after.files == 1
    take_lease(str(table), None, "dead run")
    assert optimize(str(table), None, "again", take_over=True).attempts == 1


def test_concurrent_optimize_runs_never_duplicate_rows(tmp_path: Path) -> None:
    # Without the lease, delta-rs 1.6.6 commits both of two concurrent compactions, each
    # re-adding every row (spark_groups/storage/maintenance_steps.py).
    table = tmp_path / "t"
    sink_like_table(table, 30)
    before = ids(table)
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def run(name: str) -> None:
        start.wait()
        try:
            optimize(str(table), None, name)
            outcomes.append("compacted")
        except MaintenanceRunningError:
            outcomes.append("refused")

    threads = [threading.Thread(target=run, args=(f"run-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(outcomes) == 4 and "compacted" in outcomes, outcomes
    assert ids(table) == before
    assert len(DeltaTable(str(table)).file_uris()) == 1


def test_vacuum_deletes_old_unreferenced_files_and_keeps_a_running_members_file(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t"
    sink_like_table(table, 6)
    # The default floor (the table's deletedFileRetentionDuration, 7 days) refuses 0 hours.
    with pytest.raises(OptionError) as low:
        vacuum_table(str(table), None, "vacuum:test", 0)
    assert low.value.option == "--retain-hours"
    assert "deletedFileRetentionDuration" in str(low.value)
    DeltaTable(str(table)).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    # Its checkpoint drops the (expired) tombstones: delta-rs' lite vacuum would find nothing.
    optimize(str(table), None, "optimize:test")
    # A member's data file, written before its commit references it.
    in_flight = table / "part-00000-in-flight.snappy.parquet"
    pq.write_table(pa.table({"id": pa.array([999], pa.int64())}), in_flight)
    live = {Path(u).name for u in DeltaTable(str(table)).file_uris()}
    removed = {p.name for p in table.glob("*.parquet")} - live - {in_flight.name}
    assert len(removed) == 6
    two_hours_ago = time.time() - 7200
    for name in removed:
        os.utime(table / name, (two_hours_ago, two_hours_ago))

    # Beside running members, never below an hour.
    with pytest.raises(OptionError) as beside:
        vacuum_table(str(table), None, "vacuum:test", 0)
    assert "--members-stopped" in str(beside.value)
    result = CliRunner().invoke(main, ["vacuum", str(table), "--retain-hours", "1"])

    assert result.exit_code == 0, result.output
    assert "6 file(s) deleted" in result.output
    assert {p.name for p in table.glob("*.parquet")} == live | {in_flight.name}
    assert ids(table) == list(range(60))
    assert positions(table)[PARTITIONS[2]] == 60

    # With every member stopped, 0 hours: the unreferenced file goes too.
    stopped = ["vacuum", str(table), "--retain-hours", "0", "--members-stopped"]
    result = CliRunner().invoke(main, stopped)
    assert result.exit_code == 0 and "1 file(s) deleted" in result.output, result.output
    assert {p.name for p in table.glob("*.parquet")} == live


def test_the_cli_never_echoes_a_storage_setting_and_guards_s3_commits() -> None:
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY"
    bad = CliRunner().invoke(main, ["history", "g", "--offsets-table", "/x", "--storage", secret])
    assert bad.exit_code == 2 and secret not in bad.output
    assert "--storage expects key=value; setting number 1" in bad.output

    writes = {
        "TABLE": ["optimize", "s3://b/t"],
        "TABLE ": ["vacuum", "s3://b/t"],
        # Refused before the broker (nothing listens on port 1) or any table is touched.
        "--offsets-table": ["reset", "g", "-b", "127.0.0.1:1", "--topic", "t", "--to",
                            "earliest", "--offsets-table", "s3://b/ledger"],
        "--sink-table": ["accept-gap", "g", "--sink-table", "s3://b/t", "--partition", "t:0",
                         "--until", "5"],
    }  # fmt: skip
    for option, command in writes.items():
        result = CliRunner().invoke(
            main, [*command, "--storage", f"aws_secret_access_key={secret}"], env=NO_S3_ENV
        )
        assert result.exit_code == 2, result.output
        assert f"option '{option.strip()}'" in result.output
        assert "--storage aws_conditional_put=etag" in result.output
        assert secret not in result.output


def test_a_compaction_and_a_sink_commit_on_older_snapshots_both_land_correctly(
    tmp_path: Path,
) -> None:
    # What makes compaction safe beside members: each is rebased over the other. A sink
    # commit made on a snapshot from before a compaction lands with its transaction id; a
    # compaction of a snapshot from before sink commits keeps their rows.
    table = tmp_path / "t"
    sink_like_table(table, 6)
    member_view = DeltaTable(str(table))  # a member decided on this snapshot
    compaction_view = DeltaTable(str(table))
    compaction_view.optimize.compact()
    tp = PARTITIONS[0]
    adds = pa.table({"id": pa.array([1000, 1001], pa.int64())})
    write_deltalake(str(table), adds, mode="append")  # a member's files ...
    member_view.create_write_transaction(  # ... and its commit, on the old snapshot
        [],
        "append",
        member_view.schema(),
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id(member_view.metadata().id, GROUP, tp), 1002)]
        ),
    )
    stale = DeltaTable(str(table))
    write_deltalake(str(table), pa.table({"id": pa.array([2000], pa.int64())}), mode="append")
    stale.optimize.compact()  # compacts a snapshot without the last commit

    assert ids(table) == [*range(60), 1000, 1001, 2000]
    assert positions(table)[tp] == 1002


def test_maintenance_of_a_missing_table_is_a_typed_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    with pytest.raises(MaintenanceError) as error:
        optimize(missing, None, "optimize:test")
    assert error.value.path == missing
    result = CliRunner().invoke(main, ["vacuum", missing])
    assert result.exit_code == 1 and "there is no Delta table there" in result.output
