"""Tables committed to as check-then-rename (one writer only): the group is held to one member,
tables that many writers commit to are refused there, and one process's commits take turns.

The group's cases run on the session's broker with members of this library (and a static one
closed without LeaveGroup, as a killed process leaves the group: when its session ends)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_groups.errors import OneWriterError, OptionError
from spark_groups.group.member import GroupMember
from spark_groups.group.one_writer import OneWriterGuard, guard_for
from spark_groups.offsets import Pipeline
from spark_groups.options import parse_options
from spark_groups.options.share import parse_share_options
from spark_groups.options.sink import parse_sink_options
from spark_groups.sink.pipeline import target_of
from spark_groups.storage import commit_lock
from spark_groups.storage.maintenance_steps import compact
from spark_groups.storage.object_stores import one_writer_opt_in
from spark_groups.storage.paths import DBFS_MOUNT_ENV

SERVERS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
ONE_WRITER = {"storage.allow_unsafe_rename": "true"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MOUNT_ALLOW_UNSAFE_RENAME", "AWS_CONDITIONAL_PUT", "AWS_S3_ALLOW_UNSAFE_RENAME"):
        monkeypatch.delenv(name, raising=False)


def test_which_tables_take_one_writer_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DBFS_MOUNT_ENV, str(tmp_path))
    volume = "/Volumes/main/etl/vol/orders"
    assert one_writer_opt_in(volume, {"allow_unsafe_rename": "true"}) == "allow_unsafe_rename"
    assert one_writer_opt_in("dbfs:/pipelines/orders", {"ALLOW_UNSAFE_RENAME": "TRUE"}) == (
        "allow_unsafe_rename"
    )
    assert one_writer_opt_in(volume, {}) is None  # refused outright elsewhere
    assert one_writer_opt_in("/data/orders", {"allow_unsafe_rename": "true"}) is None
    unsafe_s3 = {"aws_s3_allow_unsafe_rename": "true"}
    assert one_writer_opt_in("s3a://b/t", unsafe_s3) == "aws_s3_allow_unsafe_rename"
    assert one_writer_opt_in("s3://b/t", {**unsafe_s3, "aws_conditional_put": "etag"}) is None
    monkeypatch.setenv("MOUNT_ALLOW_UNSAFE_RENAME", "true")
    assert one_writer_opt_in(volume, {}) == "allow_unsafe_rename"


def test_a_dead_letter_table_many_tasks_write_is_refused_on_a_one_writer_store() -> None:
    given = {**SERVERS, "group.id": "etl", **ONE_WRITER, "value.format": "avro-confluent",
             "schema.registry.url": "http://registry:8081"}  # fmt: skip
    with pytest.raises(OptionError) as caught:
        parse_options({**given, "deadLetter.table": "/Volumes/main/etl/vol/_dead"})
    assert caught.value.option == "deadLetter.table"
    assert "several at once" in caught.value.problem and "One writer" in caught.value.problem
    parse_options({**given, "deadLetter.table": "/data/_dead"})  # a local disk is atomic


def test_a_share_query_into_a_one_writer_table_is_refused() -> None:
    given = {**SERVERS, "group.id": "share", **ONE_WRITER}
    with pytest.raises(OptionError) as caught:
        parse_share_options({**given, "sink.table": "/Volumes/main/etl/vol/orders"})
    assert caught.value.option == "sink.table"
    assert "DescribeShareGroups" in caught.value.problem


def test_a_sink_table_the_source_does_not_name_is_refused_on_a_one_writer_store() -> None:
    volume = "/Volumes/main/etl/vol/orders"
    options = parse_sink_options({"path": volume, "checkpointLocation": "/chk/a", **ONE_WRITER})
    with pytest.raises(OptionError) as caught:
        target_of(options, Pipeline("etl", None, None, ()), 0)
    assert caught.value.option == "path" and "sink.table" in caught.value.problem
    named = parse_sink_options({"checkpointLocation": "/chk/a", **ONE_WRITER})
    assert target_of(named, Pipeline("etl", volume, None, ()), 0).path == volume


def test_only_the_sources_one_writer_tables_are_guarded(tmp_path: Path) -> None:
    config = {"group.id": "etl", "session.timeout.ms": "2000"}
    tables = {"offsets.table": "/data/_offsets", "sink.table": "/Volumes/main/etl/vol/orders"}
    guard = guard_for(tables, {"allow_unsafe_rename": "true"}, config)
    assert guard is not None
    assert guard.tables == ("sink.table /Volumes/main/etl/vol/orders",)
    assert guard.bound_s == pytest.approx(7.0)
    assert guard_for(tables, {}, config) is None
    assert guard_for({"offsets.table": str(tmp_path)}, {"allow_unsafe_rename": "true"}, {}) is None


def _member(servers: str, topic: str, group: str, name: str, **extra: str) -> GroupMember:
    config = {
        "bootstrap.servers": servers,
        "group.id": group,
        "client.id": name,
        "session.timeout.ms": "2000",
        "heartbeat.interval.ms": "500",
        **extra,
    }
    return GroupMember(config, [topic]).start()


def test_the_second_member_is_refused_and_the_first_goes_on(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic, group = make_topic(2), f"one-{uuid.uuid4().hex[:8]}"
    first = _member(bootstrap_servers, topic, group, "member-a")
    second = None
    try:
        assert first.wait_for_assignment(30)
        config = {"group.id": group, "session.timeout.ms": "2000",
                  "bootstrap.servers": bootstrap_servers}  # fmt: skip
        mine = OneWriterGuard(["sink.table /Volumes/x"], "allow_unsafe_rename", config)
        mine.check(first)  # alone
        second = _member(bootstrap_servers, topic, group, "member-b")
        assert second.wait_for_assignment(30)
        theirs = OneWriterGuard(["sink.table /Volumes/x"], "allow_unsafe_rename", config)
        started = time.monotonic()
        with pytest.raises(OneWriterError) as caught:
            theirs.check(second)
        assert time.monotonic() - started >= theirs.bound_s
        error = caught.value
        assert error.group == group and error.opt_in == "allow_unsafe_rename"
        assert len(error.others) == 1 and error.others[0].startswith("member-a@")
        assert error.tables == ("sink.table /Volumes/x",)
        assert "session.timeout.ms" in str(error) and "abfss://" in str(error)
        mine.check(first)  # the first passed under its member id: no wait, no error
    finally:
        if second is not None:
            second.close()
        first.close()


def test_a_member_gone_without_leaving_is_waited_for_until_its_session_ends(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    """A static member closes without LeaveGroup: it stays in the group until its session
    ends, as a killed process does; the next one waits for that and goes on."""
    topic, group = make_topic(2), f"one-{uuid.uuid4().hex[:8]}"
    gone = _member(bootstrap_servers, topic, group, "killed", **{"group.instance.id": "job-a"})
    assert gone.wait_for_assignment(30)
    gone.close()
    restarted = _member(bootstrap_servers, topic, group, "restarted")
    try:
        config = {"group.id": group, "session.timeout.ms": "2000",
                  "bootstrap.servers": bootstrap_servers}  # fmt: skip
        guard = OneWriterGuard(["offsets.table /Volumes/x"], "allow_unsafe_rename", config)
        assert restarted.wait_for_assignment(30)
        guard.check(restarted)  # raises if the closed member never went
        assert restarted.assignment
    finally:
        restarted.close()


def test_one_processs_commits_to_a_one_writer_table_take_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a FUSE-like mount every commit of this process to a table holds one lock (the
    upkeep's compaction waits for a commit holding it, and goes on after); elsewhere none."""
    monkeypatch.setenv(DBFS_MOUNT_ENV, str(tmp_path))
    options = {"allow_unsafe_rename": "true"}
    path = str(tmp_path / "orders")
    for i in range(3):
        write_deltalake(path, pa.table({"id": [i]}), mode="append", storage_options=options)
    table = DeltaTable(path, storage_options=options)
    lock = commit_lock.commits_of(table)
    assert lock is commit_lock.commits_of(DeltaTable(f"file://{path}", storage_options=options))
    assert not hasattr(commit_lock.commits_of(DeltaTable(path)), "acquire")  # not opted in
    compaction = threading.Thread(target=compact, args=(table, {"by": "test"}))
    with lock:  # a batch's commit in progress
        compaction.start()
        compaction.join(1.0)
        assert compaction.is_alive(), "the compaction committed beside a commit in progress"
        assert DeltaTable(path).version() == 2
    compaction.join(30)
    assert not compaction.is_alive()
    after = DeltaTable(path)
    assert after.version() == 3 and len(after.file_uris()) == 1
    assert sorted(after.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]
