"""Unit tests of the Delta offsets ledger (no broker, no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from spark_groups.errors import LedgerError, OptionError
from spark_groups.ledger import (
    GROUP_ID_KEY,
    LEDGER_SCHEMA,
    OUTSIDE_BATCH,
    RESET_BATCH,
    LedgerRow,
    OffsetLedger,
    positions_over_time,
)
from spark_groups.ledger import append as ledger_append
from spark_groups.ledger import offset_ledger as ledger_module
from spark_groups.ledger.self_maintenance import CHECKPOINT_INTERVAL, LOG_RETENTION
from spark_groups.ledger.self_maintenance import maintain as maintain_ledger
from spark_groups.offsets import TopicPartition
from spark_groups.storage.delta import create_table

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
REPO_ROOT = Path(__file__).resolve().parents[2]


def rows_of(batch: int, ranges: dict[tuple[str, int], tuple[int, int]], **kw) -> list[LedgerRow]:
    """The ledger rows of one batch: ``{(topic, partition): (from, until)}``."""
    at = kw.get("committed_at", T0 + timedelta(seconds=batch))
    return [
        LedgerRow(
            topic=topic,
            partition=partition,
            from_offset=lo,
            until_offset=hi,
            member_id=kw.get("member_id", "member-1"),
            generation=kw.get("generation", 3),
            batch=batch,
            committed_at=at,
            log_end=kw.get("log_end"),
        )
        for (topic, partition), (lo, hi) in ranges.items()
    ]


def active_files(path: Path) -> int:
    """How many data files the newest version of the table at ``path`` references."""
    return len(DeltaTable(str(path)).file_uris())


def test_append_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    ledger = OffsetLedger(str(path), "orders-etl")
    ledger.append(rows_of(0, {("orders", 1): (0, 10), ("orders", 0): (5, 7)}))
    ledger.append(
        rows_of(1, {("orders", 0): (7, 20)}, member_id="member-2", generation=4, log_end=25)
    )

    history = ledger.history()
    assert history.schema == LEDGER_SCHEMA
    assert history.to_pylist() == [
        {
            "group_id": "orders-etl",
            "topic": "orders",
            "partition": 0,
            "from_offset": 5,
            "until_offset": 7,
            "member_id": "member-1",
            "generation": 3,
            "batch": 0,
            "committed_at": T0,
            "log_end": None,
        },
        {
            "group_id": "orders-etl",
            "topic": "orders",
            "partition": 1,
            "from_offset": 0,
            "until_offset": 10,
            "member_id": "member-1",
            "generation": 3,
            "batch": 0,
            "committed_at": T0,
            "log_end": None,
        },
        {
            "group_id": "orders-etl",
            "topic": "orders",
            "partition": 0,
            "from_offset": 7,
            "until_offset": 20,
            "member_id": "member-2",
            "generation": 4,
            "batch": 1,
            "committed_at": T0 + timedelta(seconds=1),
            "log_end": 25,
        },
    ]
    assert ledger.last_batch() == 1
    # One Delta commit per append (plus the table's creation as version 0).
    assert DeltaTable(str(path)).version() == 2
    # A second object (another process, a restart) reads the same thing.
    assert OffsetLedger(str(path), "orders-etl").history().equals(history)


def test_table_metadata_and_minimal_protocol(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    OffsetLedger(str(path), "g").append(rows_of(0, {("t", 0): (0, 1)}))
    table = DeltaTable(str(path))
    assert table.metadata().configuration[GROUP_ID_KEY] == "g"
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert pa.schema(table.schema().to_arrow()) == LEDGER_SCHEMA


def test_committed_at_is_stored_in_utc(tmp_path: Path) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    paris = timezone(timedelta(hours=1))
    ledger.append(
        rows_of(0, {("t", 0): (0, 1)}, committed_at=datetime(2026, 1, 1, 13, tzinfo=paris))
    )
    [stored] = ledger.history().column("committed_at").to_pylist()
    assert stored == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert stored.utcoffset() == timedelta(0)


def test_latest_positions_is_the_max_per_partition(tmp_path: Path) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    ledger.append(rows_of(0, {("a", 0): (0, 50), ("a", 1): (0, 5), ("b", 0): (0, 9)}))
    ledger.append(rows_of(1, {("a", 0): (50, 80), ("a", 1): (5, 6)}))
    # A replayed, older range (e.g. a late batch of a previous generation) must not win.
    ledger.append(rows_of(2, {("a", 0): (10, 30)}))

    assert ledger.latest_positions() == {
        TopicPartition("a", 0): 80,
        TopicPartition("a", 1): 6,
        TopicPartition("b", 0): 9,
    }
    wanted = [TopicPartition("a", 1), TopicPartition("b", 0), TopicPartition("zzz", 4)]
    assert ledger.latest_positions(wanted) == {
        TopicPartition("a", 1): 6,
        TopicPartition("b", 0): 9,
    }
    # Partition 0 of topic b, not partition 0 of every topic in the filter.
    assert ledger.latest_positions([TopicPartition("b", 0), TopicPartition("a", 1)]) == {
        TopicPartition("b", 0): 9,
        TopicPartition("a", 1): 6,
    }
    assert ledger.latest_positions([]) == {}


def test_nonexistent_path_reads_empty_and_is_created_on_first_append(tmp_path: Path) -> None:
    path = tmp_path / "not" / "there" / "yet"
    ledger = OffsetLedger(str(path), "g")
    assert ledger.latest_positions() == {}
    assert ledger.latest_positions([TopicPartition("t", 0)]) == {}
    assert ledger.last_batch() is None
    history = ledger.history()
    assert history.num_rows == 0
    assert history.schema == LEDGER_SCHEMA
    assert not path.exists()  # reading never creates anything

    ledger.append([])  # no rows: no table either
    assert not path.exists()

    ledger.append(rows_of(4, {("t", 0): (0, 3)}))
    assert ledger.latest_positions() == {TopicPartition("t", 0): 3}
    assert ledger.last_batch() == 4


def test_empty_existing_directory_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    path.mkdir()
    ledger = OffsetLedger(str(path), "g")
    assert ledger.latest_positions() == {}
    ledger.append(rows_of(0, {("t", 0): (0, 3)}))
    assert ledger.last_batch() == 0


def test_constructor_does_not_touch_storage(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # A path below a regular file can never work, but only the first use may say so.
    ledger = OffsetLedger(str(blocker / "ledger"), "g")
    with pytest.raises(LedgerError, match="ledger"):
        ledger.append(rows_of(0, {("t", 0): (0, 3)}))


def test_constructor_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(OptionError):
        OffsetLedger(str(tmp_path), "")
    with pytest.raises(OptionError, match="compact_every"):
        OffsetLedger(str(tmp_path), "g", compact_every=-1)


def test_table_of_another_group_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    OffsetLedger(str(path), "group-a").append(rows_of(0, {("t", 0): (0, 3)}))

    intruder = OffsetLedger(str(path), "group-b")
    for call in (
        lambda: intruder.append(rows_of(1, {("t", 0): (3, 9)})),
        intruder.latest_positions,
        intruder.history,
        intruder.last_batch,
    ):
        with pytest.raises(LedgerError) as info:
            call()
        assert str(path) in str(info.value)
        assert "group-a" in str(info.value)
        assert info.value.path == str(path)  # the error carries the table at fault
    assert DeltaTable(str(path)).version() == 1  # nothing was appended
    assert OffsetLedger(str(path), "group-a").latest_positions() == {TopicPartition("t", 0): 3}


def test_directory_with_other_files_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.mkdir()
    (path / "part-0.parquet").write_bytes(b"not a delta table")
    ledger = OffsetLedger(str(path), "g")
    with pytest.raises(LedgerError, match="not a Delta table") as info:
        ledger.latest_positions()
    assert str(path) in str(info.value)
    with pytest.raises(LedgerError, match="not a Delta table"):
        ledger.append(rows_of(0, {("t", 0): (0, 3)}))
    assert sorted(p.name for p in path.iterdir()) == ["part-0.parquet"]


def test_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    path.write_text("hello")
    ledger = OffsetLedger(str(path), "g")
    with pytest.raises(LedgerError) as info:
        ledger.append(rows_of(0, {("t", 0): (0, 3)}))
    assert str(path) in str(info.value)
    assert path.read_text() == "hello"


def test_delta_table_with_another_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other"
    write_deltalake(str(path), pa.table({"id": [1, 2], "name": ["x", "y"]}))
    ledger = OffsetLedger(str(path), "g")
    with pytest.raises(LedgerError, match="another schema") as info:
        ledger.latest_positions()
    assert str(path) in str(info.value)
    with pytest.raises(LedgerError, match="another schema"):
        ledger.append(rows_of(0, {("t", 0): (0, 3)}))
    assert DeltaTable(str(path)).version() == 0


def test_delta_table_without_group_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lookalike"
    DeltaTable.create(str(path), LEDGER_SCHEMA)  # right schema, but not created by a ledger
    with pytest.raises(LedgerError, match=GROUP_ID_KEY):
        OffsetLedger(str(path), "g").last_batch()


def test_delta_errors_are_wrapped(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    OffsetLedger(str(path), "g").append(rows_of(0, {("t", 0): (0, 3)}))
    (path / "_delta_log" / "00000000000000000001.json").write_text("{this is not json\n")
    with pytest.raises(LedgerError) as info:
        OffsetLedger(str(path), "g").latest_positions()
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, Exception)
    assert not isinstance(info.value.__cause__, LedgerError)


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (rows_of(0, {("t", 0): (5, 3)})[0], "from_offset"),
        (rows_of(0, {("t", -1): (0, 3)})[0], "partition"),
        (rows_of(0, {("", 0): (0, 3)})[0], "topic"),
        (rows_of(0, {("t", 0): (0, 3)}, committed_at=datetime(2026, 1, 1))[0], "timezone"),
    ],
)
def test_invalid_rows_are_refused(tmp_path: Path, row: LedgerRow, problem: str) -> None:
    path = tmp_path / "ledger"
    with pytest.raises(LedgerError, match=problem):
        OffsetLedger(str(path), "g").append([row])
    assert not path.exists()


def test_same_partition_twice_in_one_append_is_refused(tmp_path: Path) -> None:
    rows = rows_of(0, {("t", 0): (0, 3)}) * 2
    with pytest.raises(LedgerError, match="twice"):
        OffsetLedger(str(tmp_path / "ledger"), "g").append(rows)


def test_history_filters_by_partition_and_time(tmp_path: Path) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    for batch in range(6):
        ledger.append(
            rows_of(
                batch,
                {("a", 0): (batch * 10, batch * 10 + 10), ("b", 2): (batch, batch + 1)},
                committed_at=T0 + timedelta(minutes=batch),
            )
        )
    only_b = ledger.history(partitions=[TopicPartition("b", 2)])
    assert only_b.column("topic").to_pylist() == ["b"] * 6
    assert only_b.column("batch").to_pylist() == list(range(6))

    recent = ledger.history(since=T0 + timedelta(minutes=4))
    assert recent.column("batch").to_pylist() == [4, 4, 5, 5]
    assert recent.column("topic").to_pylist() == ["a", "b", "a", "b"]

    # ``since`` in another zone means the same instant.
    plus_two = timezone(timedelta(hours=2))
    same = ledger.history(since=(T0 + timedelta(minutes=4)).astimezone(plus_two))
    assert same.equals(recent)

    both = ledger.history(partitions=[TopicPartition("a", 0)], since=T0 + timedelta(minutes=5))
    assert both.select(["topic", "partition", "from_offset", "until_offset"]).to_pylist() == [
        {"topic": "a", "partition": 0, "from_offset": 50, "until_offset": 60}
    ]
    assert ledger.history(partitions=[TopicPartition("c", 0)]).num_rows == 0
    # Partition 2 of topic a (only b has a partition 2), not partition 2 of any topic.
    assert ledger.history(partitions=[TopicPartition("a", 2)]).num_rows == 0
    assert ledger.history(partitions=[]).num_rows == 0
    with pytest.raises(LedgerError, match="timezone-aware"):
        ledger.history(since=datetime(2026, 1, 1))


def test_compaction_every_n_commits(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    ledger = OffsetLedger(str(path), "g", compact_every=5)
    expected: dict[TopicPartition, int] = {}
    for batch in range(4):  # versions 1..4 (0 is the creation)
        ledger.append(rows_of(batch, {("t", 0): (batch, batch + 1), ("t", 1): (0, batch + 7)}))
    assert active_files(path) == 4
    assert not list((path / "_delta_log").glob("*.checkpoint.parquet"))

    # The fifth append is version 5: the ledger compacts and checkpoints after it.
    ledger.append(rows_of(4, {("t", 0): (4, 5), ("t", 1): (0, 11)}))
    expected = {TopicPartition("t", 0): 5, TopicPartition("t", 1): 11}
    assert active_files(path) == 1
    checkpoints = sorted((path / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints, "a checkpoint must be written after compaction"
    last = json.loads((path / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] >= 5
    assert ledger.latest_positions() == expected
    assert ledger.history().num_rows == 10
    assert ledger.last_batch() == 4

    # Compacted-away files are tombstoned, not yet deleted (retention: 1 hour).
    assert len(list(path.glob("*.parquet"))) == 6


def test_short_checkpoint_interval_and_log_retention(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    OffsetLedger(str(path), "g").append(rows_of(0, {("t", 0): (0, 1)}))
    config = DeltaTable(str(path)).metadata().configuration
    assert config["delta.checkpointInterval"] == CHECKPOINT_INTERVAL == "10"
    assert config["delta.logRetentionDuration"] == LOG_RETENTION == "interval 2 minutes"


def earlier_ledger(path: Path, **configuration: str) -> OffsetLedger:
    """A ledger as an earlier version created it, with these table properties; its
    maintenance runs at version 2 (the second append)."""
    create_table(
        str(path),
        LEDGER_SCHEMA,
        description="an earlier ledger",
        configuration={
            GROUP_ID_KEY: "g",
            ledger_module.FORMAT_KEY: ledger_module.LEDGER_FORMAT,
            **configuration,
        },
    )
    return OffsetLedger(str(path), "g", compact_every=2)


def test_a_ledger_of_an_earlier_version_gets_them_at_its_next_maintenance(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger"
    # No checkpoint interval (Delta's 100), a day of log; and a file retention an operator
    # changed, which must be left alone.
    ledger = earlier_ledger(
        path,
        **{
            "delta.deletedFileRetentionDuration": "interval 2 hours",
            "delta.logRetentionDuration": "interval 1 days",
        },
    )
    ledger.append(rows_of(0, {("t", 0): (0, 1)}))
    assert "delta.checkpointInterval" not in DeltaTable(str(path)).metadata().configuration
    ledger.append(rows_of(1, {("t", 0): (1, 2)}))  # version 2: maintenance
    config = DeltaTable(str(path)).metadata().configuration
    assert config["delta.checkpointInterval"] == "10"
    assert config["delta.logRetentionDuration"] == LOG_RETENTION
    assert config["delta.deletedFileRetentionDuration"] == "interval 2 hours"
    assert ledger.latest_positions() == {TopicPartition("t", 0): 2}
    assert ledger.history().num_rows == 2


def test_a_ledger_with_an_hour_of_log_gets_two_minutes(tmp_path: Path) -> None:
    """The retention the version before this one gave its ledgers is brought down too."""
    path = tmp_path / "ledger"
    ledger = earlier_ledger(
        path,
        **{"delta.checkpointInterval": "10", "delta.logRetentionDuration": "interval 1 hours"},
    )
    ledger.append(rows_of(0, {("t", 0): (0, 1)}))
    ledger.append(rows_of(1, {("t", 0): (1, 2)}))  # version 2: maintenance
    config = DeltaTable(str(path)).metadata().configuration
    assert config["delta.logRetentionDuration"] == LOG_RETENTION


def test_an_append_on_a_snapshot_older_than_the_log_refreshes_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger"
    slow = OffsetLedger(str(path), "g", compact_every=0)  # e.g. a query with a 2-hour trigger
    slow.append(rows_of(0, {("t", 0): (0, 1)}))
    DeltaTable(str(path)).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds"}
    )
    busy = OffsetLedger(str(path), "g", compact_every=5)  # a busy member of the same ledger
    for batch in range(1, 12):
        busy.append(rows_of(batch, {("t", 1): (batch, batch + 1)}))
    # Its maintenance deleted the log entries after the slow writer's snapshot.
    assert not (path / "_delta_log" / f"{1:020d}.json").exists()
    monkeypatch.setattr(ledger_append, "REFRESH_AFTER_S", 0.0)  # the snapshot is "old"
    slow.append(rows_of(12, {("t", 0): (1, 2)}))
    assert slow.latest_positions() == {TopicPartition("t", 0): 2, TopicPartition("t", 1): 12}


def test_compaction_counts_table_versions_across_objects(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    first = OffsetLedger(str(path), "g", compact_every=5)
    for batch in range(3):
        first.append(rows_of(batch, {("t", 0): (batch, batch + 1)}))
    # A restarted process: a new object that knows nothing of the earlier commits.
    second = OffsetLedger(str(path), "g", compact_every=5)
    second.append(rows_of(3, {("t", 0): (3, 4)}))
    assert active_files(path) == 4
    second.append(rows_of(4, {("t", 0): (4, 5)}))
    assert active_files(path) == 1
    assert second.latest_positions() == {TopicPartition("t", 0): 5}


def test_no_maintenance_when_compact_every_is_zero(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    ledger = OffsetLedger(str(path), "g", compact_every=0)
    for batch in range(7):
        ledger.append(rows_of(batch, {("t", 0): (batch, batch + 1)}))
    assert active_files(path) == 7
    assert ledger.latest_positions() == {TopicPartition("t", 0): 7}


def test_concurrent_appends_from_two_threads_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    OffsetLedger(path, "g").append(rows_of(0, {("setup", 0): (0, 1)}))
    per_writer = 20
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(topic: str) -> None:
        ledger = OffsetLedger(path, "g", compact_every=15)  # maintenance under contention too
        start.wait()
        try:
            for batch in range(1, per_writer + 1):
                ledger.append(
                    rows_of(batch, {(topic, 0): (batch - 1, batch), (topic, 1): (0, batch)})
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(topic,)) for topic in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    history = OffsetLedger(path, "g").history()
    assert history.num_rows == 1 + 2 * 2 * per_writer
    for topic in ("left", "right"):
        mine = history.filter(pc.equal(history.column("topic"), topic))
        keys = sorted(
            zip(mine.column("batch").to_pylist(), mine.column("partition").to_pylist(), strict=True)
        )
        assert keys == [(b, p) for b in range(1, per_writer + 1) for p in (0, 1)]
    assert OffsetLedger(path, "g").latest_positions() == {
        TopicPartition("setup", 0): 1,
        TopicPartition("left", 0): per_writer,
        TopicPartition("left", 1): per_writer,
        TopicPartition("right", 0): per_writer,
        TopicPartition("right", 1): per_writer,
    }


def test_concurrent_first_appends_create_the_table_once(tmp_path: Path) -> None:
    path = str(tmp_path / "new" / "ledger")
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(topic: str) -> None:
        ledger = OffsetLedger(path, "g")
        start.wait()
        try:
            ledger.append(rows_of(0, {(topic, 0): (0, 5)}))
        except BaseException as exc:  # reported below
            errors.append(exc)

    topics = ["w0", "w1", "w2", "w3"]
    threads = [threading.Thread(target=writer, args=(topic,)) for topic in topics]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert OffsetLedger(path, "g").latest_positions() == {TopicPartition(t, 0): 5 for t in topics}
    assert DeltaTable(path).version() == 4  # one creation, four appends


def test_two_groups_racing_to_create_one_path_one_wins(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    start = threading.Barrier(2)
    outcome: dict[str, BaseException | None] = {}

    def writer(group: str) -> None:
        ledger = OffsetLedger(path, group)
        start.wait()
        try:
            ledger.append(rows_of(0, {("t", 0): (0, 5)}))
            outcome[group] = None
        except BaseException as exc:  # inspected below
            outcome[group] = exc

    threads = [threading.Thread(target=writer, args=(group,)) for group in ("ga", "gb")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [group for group, exc in outcome.items() if exc is None]
    assert len(winners) == 1, outcome
    [loser] = [group for group in outcome if group not in winners]
    assert isinstance(outcome[loser], LedgerError)
    assert f"belongs to consumer group {winners[0]!r}" in str(outcome[loser])
    table = DeltaTable(path)
    assert table.metadata().configuration[GROUP_ID_KEY] == winners[0]
    assert table.version() == 1
    assert OffsetLedger(path, winners[0]).history().column("group_id").to_pylist() == winners


def test_concurrent_maintenance_in_one_process_does_not_duplicate_rows(tmp_path: Path) -> None:
    # delta-rs 1.6.6 lets two concurrent optimize.compact runs both commit, each re-adding
    # the same rows. The ledger serialises maintenance per table within a process.
    path = str(tmp_path / "ledger")
    setup = OffsetLedger(path, "g", compact_every=0)
    for batch in range(12):
        setup.append(rows_of(batch, {("t", 0): (batch, batch + 1)}))
    ledgers = [OffsetLedger(path, "g", compact_every=200) for _ in range(2)]
    for ledger in ledgers:
        assert ledger.last_batch() == 11  # loads the table
    start = threading.Barrier(2)

    def maintain(ledger: OffsetLedger) -> None:
        start.wait()
        table = ledger._store.table
        assert table is not None
        maintain_ledger(table, ledger.path, {GROUP_ID_KEY: "g"})

    threads = [threading.Thread(target=maintain, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert active_files(Path(path)) == 1
    assert OffsetLedger(path, "g").history().column("batch").to_pylist() == list(range(12))


_WRITER_PROCESS = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timezone
    from spark_groups.ledger import LedgerRow, OffsetLedger

    path, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ledger = OffsetLedger(path, "g")
    print("ready", flush=True)
    sys.stdin.readline()  # the parent's "go": both processes start appending together
    now = datetime.now(timezone.utc)
    for batch in range(count):
        ledger.append([LedgerRow(topic, 0, batch, batch + 1, "m", 1, batch, now)])
    print("done", flush=True)
    """
)


def test_concurrent_appends_from_two_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger")
    OffsetLedger(path, "g").append(rows_of(0, {("setup", 0): (0, 1)}))
    count = 15
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER_PROCESS, path, topic, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        for topic in ("p1", "p2")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == "done"
    positions = OffsetLedger(path, "g").latest_positions()
    assert positions == {
        TopicPartition("setup", 0): 1,
        TopicPartition("p1", 0): count,
        TopicPartition("p2", 0): count,
    }
    assert OffsetLedger(path, "g").history().num_rows == 1 + 2 * count


def test_commit_failed_is_retried_without_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = deltalake.write_deltalake
    failures = {"left": 2}

    def flaky(*args, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            raise CommitFailedError("Failed to commit transaction: 15")
        return real(*args, **kwargs)

    path = tmp_path / "ledger"
    ledger = OffsetLedger(str(path), "g")
    ledger.append(rows_of(0, {("t", 0): (0, 1)}))
    monkeypatch.setattr(deltalake, "write_deltalake", flaky)
    ledger.append(rows_of(1, {("t", 0): (1, 5)}))
    assert failures["left"] == 0
    assert ledger.history().column("batch").to_pylist() == [0, 1]
    assert ledger.latest_positions() == {TopicPartition("t", 0): 5}


def test_commit_failed_too_often_raises_ledger_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger"
    ledger = OffsetLedger(str(path), "g")
    ledger.append(rows_of(0, {("t", 0): (0, 1)}))
    calls = []

    def always_fails(*args, **kwargs):
        calls.append(1)
        raise CommitFailedError("Failed to commit transaction: 15")

    monkeypatch.setattr(deltalake, "write_deltalake", always_fails)
    monkeypatch.setattr(ledger_append, "MAX_COMMIT_ATTEMPTS", 3)
    with pytest.raises(LedgerError, match="concurrent") as info:
        ledger.append(rows_of(1, {("t", 0): (1, 5)}))
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, CommitFailedError)
    assert len(calls) == 3
    monkeypatch.undo()
    assert ledger.last_batch() == 0


def test_a_reset_marker_moves_the_position_backwards_and_later_batches_count_from_it(
    tmp_path: Path,
) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    ledger.append(rows_of(0, {("a", 0): (0, 50), ("a", 1): (0, 5), ("b", 0): (0, 9)}))
    # Stamped in the future: record_reset must still come after it (clock skew).
    ledger.append(rows_of(1, {("a", 0): (50, 80)}, committed_at=datetime.now(UTC) + timedelta(1)))

    rows = ledger.record_reset({a0: 20, a1: 7}, {a0: 80, a1: 5}, "reset:ops@host")
    assert [(r.from_offset, r.until_offset, r.batch) for r in rows] == [
        (80, 20, RESET_BATCH),
        (5, 7, RESET_BATCH),
    ]
    assert ledger.latest_positions() == {a0: 20, a1: 7, b0: 9}
    assert ledger.last_batch() == 1  # a reset is not a batch

    # A batch after the reset counts from the reset on; an older range does not win.
    later = rows[0].committed_at + timedelta(seconds=1)
    ledger.append(rows_of(2, {("a", 0): (20, 30)}, committed_at=later))
    assert ledger.latest_positions([a0]) == {a0: 30}
    series = positions_over_time(ledger.history())
    assert [p for _, p in series[a0]] == [50, 80, 20, 30]
    assert {tp: points[-1][1] for tp, points in series.items()} == ledger.latest_positions()

    # Reset again, to the very same offset: the newest marker wins.
    ledger.record_reset({a0: 0}, {a0: 30}, "reset:ops@host")
    assert ledger.latest_positions([a0]) == {a0: 0}


def test_only_reset_markers_may_run_backwards(tmp_path: Path) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    with pytest.raises(LedgerError, match="from_offset <= until_offset"):
        ledger.append(rows_of(0, {("a", 0): (9, 3)}))
    with pytest.raises(LedgerError, match="batch must be >= -3"):
        ledger.append(rows_of(-4, {("a", 0): (0, 3)}))
    with pytest.raises(LedgerError, match="from_offset <= until_offset"):  # outside rows
        ledger.append(rows_of(OUTSIDE_BATCH, {("a", 0): (9, 3)}))
    ledger.append(rows_of(RESET_BATCH, {("a", 0): (9, 3)}))
    assert ledger.latest_positions() == {TopicPartition("a", 0): 3}


def test_history_until_is_exclusive(tmp_path: Path) -> None:
    ledger = OffsetLedger(str(tmp_path / "ledger"), "g")
    for batch in range(4):
        ledger.append(rows_of(batch, {("a", 0): (batch, batch + 1)}))
    window = ledger.history(since=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=3))
    assert window.column("batch").to_pylist() == [1, 2]
    with pytest.raises(LedgerError, match="until"):
        ledger.history(until=datetime(2026, 1, 1))


def test_a_ledger_from_before_log_end_gets_the_column_at_its_next_append(tmp_path: Path) -> None:
    """Ledgers written by earlier versions (no ``log_end``) stay readable and writable."""
    from spark_groups.storage.delta import create_table

    path = str(tmp_path / "old")
    old_schema = pa.schema([f for f in LEDGER_SCHEMA if f.name != "log_end"])
    assert (
        create_table(
            path,
            old_schema,
            name="old",
            description="a ledger of an earlier version",
            configuration={ledger_module.GROUP_ID_KEY: "g", ledger_module.FORMAT_KEY: "1"},
            storage_options=None,
        )
        is None
    )
    old_row = rows_of(0, {("t", 0): (0, 5)})[0]
    data = {name: [getattr(old_row, name, "g")] for name in old_schema.names}
    write_deltalake(path, pa.Table.from_pydict(data, schema=old_schema), mode="append")

    ledger = OffsetLedger(path, "g")
    assert ledger.history().column("log_end").to_pylist() == [None]
    ledger.append(rows_of(1, {("t", 0): (5, 9)}, log_end=12))
    assert ledger.history().column("log_end").to_pylist() == [None, 12]
    assert "log_end" in DeltaTable(path).schema().to_arrow().names
    assert ledger.latest_positions() == {TopicPartition("t", 0): 9}
