"""``spark-groups optimize`` / ``vacuum`` of a delta-group sink table on S3 (S3Proxy with
conditional writes) beside two running member processes, and the CLI reading the ledger and
the rebalance history on S3 with ``--storage`` (docs/storage.md, "Maintenance"). A sink table
compacted and vacuumed on local disk, read by delta-spark: tests/integration/test_delta_spark.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, QueryBuilder

from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.sink.live_maintenance import _set_lease, lease_id
from spark_groups.tools.cli import main
from spark_groups.tools.s3_server import S3Server

from support.broker import unique, wait_until
from support.members import Member, member_spec, stop_all
from support.producers import IdProducer

OPTIMIZE_RUNS = 3


def s3_ids(table: str, options: dict[str, str]) -> list[int]:
    """Every id in the newest version of the table on S3 (duplicates kept)."""
    dt = DeltaTable(table, storage_options=options)
    reader = QueryBuilder().register("t", dt).execute("SELECT id FROM t")
    return pa.table(reader.read_all()).column("id").to_pylist()


def member_versions(table: str, options: dict[str, str]) -> dict[str, list[int]]:
    """The table versions of each member's sink commits (those with Kafka ranges)."""
    out: dict[str, list[int]] = {}
    try:
        history = DeltaTable(table, storage_options=options).history()
    except Exception:  # not created yet
        return out
    for commit in history:
        if "spark_groups.ranges" in commit:
            out.setdefault(commit["spark_groups.member"], []).append(commit["version"])
    return out


def storage_args(options: dict[str, str]) -> list[str]:
    return [arg for k, v in options.items() for arg in ("--storage", f"{k}={v}")]


def test_two_runs_taking_the_lease_at_once_on_s3_exactly_one_commits(
    s3_server: S3Server, s3_bucket: str
) -> None:
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    options = s3_server.storage_options()
    table = f"{s3_bucket}/t"
    write_deltalake(table, pa.table({"id": [1, 2]}), storage_options=options)
    seen = [DeltaTable(table, storage_options=options) for _ in range(2)]
    _set_lease(seen[0], 10**15, "a", "taken")
    with pytest.raises(CommitFailedError):
        _set_lease(seen[1], 10**15 + 1, "b", "taken")
    after = DeltaTable(table, storage_options=options)
    assert after.transaction_version(lease_id(after)) == 10**15


@pytest.mark.timeout(600)
def test_optimize_and_vacuum_on_s3_beside_two_members_every_record_once(
    bootstrap_servers: str, make_topic, s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    topic, group = make_topic(4), unique("g")
    options = s3_server.storage_options()
    storage = {f"storage.{k}": v for k, v in options.items()}
    table, ledger = f"{s3_bucket}/tables/orders", f"{s3_bucket}/_offsets/{group}"
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "2 seconds")
    spec.update(table=table, ledger=ledger, source_options=storage, sink_options=storage)
    a = Member("A", {**spec, "checkpoint": str(tmp_path / "cp-a")}, logs)
    b = Member("B", {**spec, "checkpoint": str(tmp_path / "cp-b")}, logs)
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=100)
    cli = CliRunner()
    runs = []
    producer.start()
    try:
        a.start()
        b.start()

        def both_committed_since(version: int) -> bool:
            seen = member_versions(table, options)
            return all(any(v > version for v in seen.get(m, [])) for m in ("A", "B"))

        wait_until(lambda: both_committed_since(-1), 180, "both members to commit")
        for _ in range(OPTIMIZE_RUNS):
            before = DeltaTable(table, storage_options=options).version()
            wait_until(lambda v=before: both_committed_since(v), 120, "new commits of both")
            result = cli.invoke(main, ["optimize", table, *storage_args(options)])
            assert result.exit_code == 0, result.output
            runs.append(result.output)
        last_optimize = DeltaTable(table, storage_options=options).version()
        wait_until(lambda: both_committed_since(last_optimize), 120, "commits after optimize")
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        wait_until(lambda: set(s3_ids(table, options)) >= produced, 120, "every id to land")
        stop_all((a, b), stop_file)
    finally:
        producer.stop_event.set()
        stop_file.touch()
        a.kill()
        b.kill()

    # Every produced id exactly once, after three compactions among the members' commits.
    ids = s3_ids(table, options)
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not twice, f"written twice: {twice[:20]}"
    assert set(ids) == produced
    # Each run compacted: fewer files after than before (the summary's two rows).
    for output in runs:
        rows = [line.split("│") for line in output.splitlines() if "│" in line]
        files = {row[1].strip(): int(row[2]) for row in rows if len(row) > 3}
        assert files["after"] < files["before"], output
    dt = DeltaTable(table, storage_options=options)
    history = dt.history()
    optimizes = [c for c in history if c["operation"] == "OPTIMIZE"]
    assert len(optimizes) == OPTIMIZE_RUNS
    # The transaction ids survived: they are the partitions' ends (every record of the topic
    # is one of the producer's ids, id % 4 its partition).
    ends = Counter(TopicPartition(topic, i % 4) for i in ids)
    assert committed_positions(table, group, list(ends), options) == dict(ends)
    concurrent = sum(
        1
        for o in optimizes
        for c in history
        if "spark_groups.ranges" in c and o["readVersion"] < c["version"] < o["version"]
    )
    print("sink commits landed while a compaction ran:", concurrent)

    # Vacuum: with the table's retention lowered (no reader needs older versions here), the
    # files the compactions removed go, the live ones stay, the rows read the same.
    dt.alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 0 hours"})
    fs = s3_server.filesystem()
    bucket_path = table.removeprefix("s3://")

    def objects() -> set[str]:
        """Every object of the table outside its log."""
        from pyarrow import fs as pafs

        found = fs.get_file_info(pafs.FileSelector(bucket_path, recursive=True))
        return {
            f.path for f in found if f.type == pafs.FileType.File and "/_delta_log/" not in f.path
        }

    live = {u.removeprefix("s3://") for u in DeltaTable(table, storage_options=options).file_uris()}
    stale = objects() - live
    assert stale
    # What it will delete: exactly the unreferenced objects, and an empty object at the
    # table's own path (a folder marker, relative path "").
    planned = DeltaTable(table, storage_options=options).vacuum(0, dry_run=True, full=True)
    assert set(planned) - {""} == {p.removeprefix(f"{bucket_path}/") for p in stale}
    result = cli.invoke(
        main, ["vacuum", table, "--retain-hours", "0", "--members-stopped", *storage_args(options)]
    )
    assert result.exit_code == 0, result.output
    assert f"{len(planned)} file(s) deleted" in result.output
    assert objects() == live
    assert sorted(s3_ids(table, options)) == sorted(ids)

    # The CLI reads the ledger and the rebalance history on S3 with --storage; the secret
    # never shows.
    shown = cli.invoke(main, ["history", group, "--offsets-table", ledger, *storage_args(options)])
    assert shown.exit_code == 0, shown.output
    assert "assigned" in shown.output and "batch" in shown.output
    described = cli.invoke(
        main,
        ["describe", group, "-b", bootstrap_servers, "--offsets-table", ledger,
         "--sink-table", table, *storage_args(options)],
    )  # fmt: skip
    assert described.exit_code == 0, described.output
    assert topic in described.output
    for output in (*runs, result.output, shown.output, described.output):
        assert s3_server.secret_key not in output and s3_server.access_key not in output
    # The maintenance commits name who ran them, and hold no storage setting.
    ours = [c for c in history if str(c.get("spark_groups.member", "")).startswith("optimize:")]
    infos = json.dumps(ours)
    assert "optimize:" in infos and s3_server.secret_key not in infos
