"""The Delta sink's driver-side commit: fencing, compare-and-set, files (no Spark, no broker)."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_groups.errors import SinkError, SinkGapError
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.sink.attempt import CommitAttempt
from spark_groups.sink.decision import BatchDecision
from spark_groups.sink.group_commit import COMMIT_INFO_KEYS, DeltaSink, app_id, committed_positions
from spark_groups.sink.sink_table import SinkTable
from spark_groups.sink.staged import StagedFiles
from spark_groups.sink.writer import KafkaRows

from sink_support import (
    SCHEMA,
    TOPIC,
    offsets_in,
    parquet_files,
    plan,
    rows,
    sql,
    write_task,
)

TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


def sink(table: Path, **kw) -> DeltaSink:
    return DeltaSink(str(table), kw.pop("group_id", "g1"), member="test", **kw)


def test_one_commit_adds_the_files_and_one_transaction_per_partition(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = write_task(table, [rows(0, range(0, 10))]) + write_task(table, [rows(1, range(3, 8))])
    result = sink(table).commit(plan(0, {0: (0, 10), 1: (3, 8)}), files, SCHEMA)

    assert result.version == 1  # version 0 created the table
    assert result.rows == 15 and result.files == 2 and result.dropped == ()
    assert result.written == {TP0: OffsetRange(TOPIC, 0, 0, 10), TP1: OffsetRange(TOPIC, 1, 3, 8)}
    assert offsets_in(table, 0) == list(range(10)) and offsets_in(table, 1) == list(range(3, 8))
    dt = DeltaTable(str(table))
    assert committed_positions(str(table), "g1", [TP0, TP1]) == {TP0: 10, TP1: 8}
    assert dt.transaction_version(app_id(dt.metadata().id, "g1", TP0)) == 10
    # One commit holds everything, with the batch's metadata in its commit info.
    entry = dt.history(1)[0]
    assert entry["version"] == 1 and entry["operation"] == "WRITE"
    assert set(COMMIT_INFO_KEYS) <= set(entry)
    assert entry["spark_groups.batch"] == "0" and entry["spark_groups.group"] == "g1"
    assert entry["spark_groups.member"] == "test"
    assert json.loads(entry["spark_groups.ranges"]) == {TOPIC: {"0": [0, 10], "1": [3, 8]}}
    # A plain Delta table: the minimal protocol, readable by any Delta reader.
    protocol = dt.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    # Every file has Delta statistics (delta-rs parses them back).
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    stats = sorted((a["num_records"], a["min.offset"], a["max.offset"]) for a in actions)
    assert stats == [(5, 3, 7), (10, 0, 9)]


def test_replayed_batch_writes_its_rows_once(tmp_path: Path) -> None:
    table = tmp_path / "t"
    the_plan = plan(4, {0: (0, 10), 1: (0, 5)})
    first = write_task(table, [rows(0, range(10)), rows(1, range(5))])
    sink(table).commit(the_plan, first, SCHEMA)
    version = DeltaTable(str(table)).version()

    # Spark replays the batch after a crash: the tasks write new files for the same rows.
    again = write_task(table, [rows(0, range(10)), rows(1, range(5))])
    result = sink(table).commit(the_plan, again, SCHEMA)

    assert result.version is None and set(result.dropped) == {TP0, TP1}
    assert DeltaTable(str(table)).version() == version  # nothing committed
    assert offsets_in(table, 0) == list(range(10)) and offsets_in(table, 1) == list(range(5))
    assert parquet_files(table) == {f.path for f in first}  # the replay's files are gone


def test_partially_covered_partition_writes_only_the_new_rows(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 10)}), write_task(table, [rows(0, range(10))]), SCHEMA)
    # Another member planned p0 as [5, 15) and p1 as [0, 4): rows 5..9 of p0 are in already.
    files = write_task(table, [rows(0, range(5, 15))]) + write_task(table, [rows(1, range(4))])
    result = sink(table).commit(plan(1, {0: (5, 15), 1: (0, 4)}), files, SCHEMA)

    assert result.written[TP0] == OffsetRange(TOPIC, 0, 10, 15)
    assert result.rows == 5 + 4
    assert offsets_in(table, 0) == list(range(15))
    assert committed_positions(str(table), "g1", [TP0, TP1]) == {TP0: 15, TP1: 4}
    # The straddling file was rewritten; only committed files remain on disk.
    assert parquet_files(table) == {Path(u).relative_to(table).as_posix() for u in
                                    DeltaTable(str(table)).file_uris()}  # fmt: skip


def test_filtered_partition_still_advances_its_transaction(tmp_path: Path) -> None:
    table = tmp_path / "t"
    # The pipeline filtered away every row of p1 and the first rows of p0.
    files = write_task(table, [rows(0, range(6, 10))])
    result = sink(table).commit(plan(0, {0: (0, 10), 1: (0, 7)}), files, SCHEMA)
    assert result.written[TP1] == OffsetRange(TOPIC, 1, 0, 7)
    assert committed_positions(str(table), "g1", [TP0, TP1]) == {TP0: 10, TP1: 7}
    # Replaying it finds both partitions done, although the rows alone could not tell.
    again = write_task(table, [rows(0, range(6, 10))])
    assert sink(table).commit(plan(0, {0: (0, 10), 1: (0, 7)}), again, SCHEMA).version is None


def test_a_batch_that_would_leave_a_gap_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 10)}), write_task(table, [rows(0, range(10))]), SCHEMA)
    version = DeltaTable(str(table)).version()
    files = write_task(table, [rows(0, range(12, 20))]) + write_task(table, [rows(1, range(3))])

    with pytest.raises(SinkGapError, match=r"orders-0: the table holds offsets up to 10.*12") as e:
        sink(table).commit(plan(1, {0: (12, 20), 1: (0, 3)}), files, SCHEMA)
    assert e.value.gaps == {TopicPartition(TOPIC, 0): (10, 12)}  # the error carries its data

    assert DeltaTable(str(table)).version() == version  # not even p1 was written
    assert offsets_in(table, 0) == list(range(10))
    assert not {f.path for f in files} & parquet_files(table)  # the batch's files are gone

    # failOnGap=false writes it anyway.
    files = write_task(table, [rows(0, range(12, 20))])
    sink(table, fail_on_gap=False).commit(plan(1, {0: (12, 20)}), files, SCHEMA)
    assert offsets_in(table, 0) == [*range(10), *range(12, 20)]


def test_a_missing_file_leaves_the_table_unchanged(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 5)}), write_task(table, [rows(0, range(5))]), SCHEMA)
    version = DeltaTable(str(table)).version()
    files = write_task(table, [rows(0, range(5, 10))]) + write_task(table, [rows(1, range(4))])
    (table / files[1].path).unlink()

    with pytest.raises(SinkError, match=r"1 data file\(s\) .* missing"):
        sink(table).commit(plan(1, {0: (5, 10), 1: (0, 4)}), files, SCHEMA)

    assert DeltaTable(str(table)).version() == version
    assert committed_positions(str(table), "g1", [TP0, TP1]) == {TP0: 5}
    assert files[0].path not in parquet_files(table)  # the batch's other file is cleaned up


def test_a_file_with_another_size_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = write_task(table, [rows(0, range(5))])
    with (table / files[0].path).open("ab") as f:
        f.write(b"torn")
    with pytest.raises(SinkError, match="bytes, its task wrote"):
        sink(table).commit(plan(0, {0: (0, 5)}), files, SCHEMA)
    assert not (table / "_delta_log").exists() or DeltaTable(str(table)).file_uris() == []


def test_rows_outside_the_batch_plan_are_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    # A stateful operator emitted a row of an earlier batch (offset 2 < from 5).
    files = write_task(table, [rows(0, [2, 5, 6])])
    with pytest.raises(SinkError, match=r"offsets 2\.\.6, outside the batch's range \[5, 10\)"):
        sink(table).commit(plan(3, {0: (5, 10)}), files, SCHEMA)
    files = write_task(table, [rows(1, [0])])
    with pytest.raises(SinkError, match="orders-1, which the batch did not read"):
        sink(table).commit(plan(3, {0: (5, 10)}), files, SCHEMA)
    assert parquet_files(table) == set()


def test_abort_deletes_the_batch_files(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = write_task(table, [rows(0, range(5))]) + write_task(table, [rows(1, range(5))])
    assert len(parquet_files(table)) == 2
    sink(table).abort(files)
    assert parquet_files(table) == set()


def test_abort_after_a_commit_that_landed_keeps_the_tables_files(tmp_path: Path) -> None:
    """Spark aborts a batch whose commit call failed, also when the call failed after the
    Delta commit landed (the worker died at the crash point ``sink.committed``): the files
    the table references stay, so the table stays readable and complete."""
    table = tmp_path / "t"
    files = write_task(table, [rows(0, range(5)), rows(1, range(5))])
    sink(table).commit(plan(0, {0: (0, 5), 1: (0, 5)}), files, SCHEMA)
    stray = write_task(table, [rows(0, range(5, 8))])  # a task file that never committed
    sink(table).abort([*files, *stray])
    assert parquet_files(table) == {f.path for f in files}
    assert offsets_in(table, 0) == list(range(5)) and offsets_in(table, 1) == list(range(5))


class RacingSink(DeltaSink):
    """A sink that lets ``rival`` commit between its decision and its commit, once."""

    def __init__(self, *args, rival=None, **kw) -> None:
        super().__init__(*args, **kw)
        self.rival = rival
        self.decided_versions: list[dict] = []

    def _before_commit(self, attempt, table, decision) -> None:
        self.decided_versions.append(dict(decision.versions))
        if self.rival is not None:
            rival, self.rival = self.rival, None
            rival()


def test_concurrent_commit_of_the_same_offsets_exactly_one_wins(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 10)}), write_task(table, [rows(0, range(10))]), SCHEMA)
    ours = write_task(table, [rows(0, range(10, 20))])
    theirs = write_task(table, [rows(0, range(10, 20))])
    outcomes = []

    def rival() -> None:  # the other member commits the same range first
        outcomes.append(sink(table).commit(plan(7, {0: (10, 20)}), theirs, SCHEMA))

    racer = RacingSink(str(table), "g1", member="racer", rival=rival)
    result = racer.commit(plan(3, {0: (10, 20)}), ours, SCHEMA)

    assert outcomes[0].version is not None  # the rival won
    # Our first decision saw 10 and wanted to write; the commit failed on the conflict, the
    # second decision saw 20 and dropped everything.
    assert racer.decided_versions == [{TP0: 10}]
    assert result.version is None and result.dropped == (TP0,) and result.attempts == 2
    assert offsets_in(table, 0) == list(range(20))
    assert not {f.path for f in ours} & parquet_files(table)


def test_concurrent_commit_of_other_partitions_does_not_conflict(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 1), 1: (0, 1)}),
                       write_task(table, [rows(0, [0]), rows(1, [0])]), SCHEMA)  # fmt: skip
    theirs = write_task(table, [rows(1, range(1, 5))])

    def rival() -> None:
        sink(table).commit(plan(1, {1: (1, 5)}), theirs, SCHEMA)

    racer = RacingSink(str(table), "g1", rival=rival)
    result = racer.commit(plan(1, {0: (1, 5)}), write_task(table, [rows(0, range(1, 5))]), SCHEMA)
    assert result.attempts == 1 and result.version == 3  # rebased over the rival's version 2
    assert offsets_in(table, 0) == list(range(5)) and offsets_in(table, 1) == list(range(5))


def test_racing_writers_never_duplicate_or_skip_an_offset(tmp_path: Path) -> None:
    """Three writers (threads, own sink objects) each write partition 0 from 0 to 200 in
    batches of their own random sizes, as members replaying each other's work would."""
    table = tmp_path / "t"
    sink(table).commit(plan(0, {1: (0, 1)}), write_task(table, [rows(1, [0])]), SCHEMA)
    start = threading.Barrier(3)
    errors: list[BaseException] = []
    stats: list[tuple[int, int]] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        me = DeltaSink(str(table), "g1", member=f"w{seed}")
        try:
            start.wait(10)
            position, batch, dropped = 0, 0, 0
            while position < 200:
                until = min(200, position + rng.randint(5, 40))
                files = write_task(table, [rows(0, range(position, until))])
                result = me.commit(plan(batch, {0: (position, until)}), files, SCHEMA)
                dropped += len(result.dropped)
                position, batch = until, batch + 1
            stats.append((batch, dropped))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert offsets_in(table, 0) == list(range(200))  # every offset exactly once
    assert committed_positions(str(table), "g1", [TP0]) == {TP0: 200}
    assert sum(d for _, d in stats) > 0  # the writers did overlap
    live = {Path(u).relative_to(table).as_posix() for u in DeltaTable(str(table)).file_uris()}
    assert parquet_files(table) == live  # no leftover files


def test_groups_have_their_own_transactions(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert committed_positions(str(table), "g1", [TP0]) == {}  # no table yet
    sink(table).commit(plan(0, {0: (0, 5)}), write_task(table, [rows(0, range(5))]), SCHEMA)
    # Another group writing the same partition into the same table is not fenced by g1.
    files = write_task(table, [rows(0, range(5))])
    result = sink(table, group_id="g2").commit(plan(0, {0: (0, 5)}), files, SCHEMA)
    assert result.version is not None
    assert committed_positions(str(table), "g2", [TP0, TP1]) == {TP0: 5}
    assert committed_positions(str(table), "g1", []) == {}


def test_schema_evolution_adds_nullable_columns_only_with_merge_schema(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 3)}), write_task(table, [rows(0, range(3))]), SCHEMA)
    wider = SCHEMA.append(pa.field("note", pa.string(), nullable=False))
    batch = rows(0, range(3, 6))
    batch = pa.record_batch([*batch.columns, pa.array(["a", "b", "c"])], schema=wider)

    files = write_task(table, [batch], wider)
    with pytest.raises(SinkError, match=r"column 'note'.*mergeSchema=true"):
        sink(table).commit(plan(1, {0: (3, 6)}), files, wider)

    files = write_task(table, [batch], wider)
    sink(table, merge_schema=True).commit(plan(1, {0: (3, 6)}), files, wider)
    field = DeltaTable(str(table)).schema().to_arrow().field("note")
    assert field.nullable
    notes = sql(table, 'SELECT "offset", note FROM t ORDER BY "offset"')
    assert [r["note"] for r in notes] == [None, None, None, "a", "b", "c"]
    # A later query without the column still writes (the column is nullable).
    sink(table).commit(plan(2, {0: (6, 8)}), write_task(table, [rows(0, [6, 7])]), SCHEMA)
    assert offsets_in(table, 0) == list(range(8))


def test_a_changed_column_type_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 3)}), write_task(table, [rows(0, range(3))]), SCHEMA)
    other = pa.schema([pa.field("id", pa.string()), *list(SCHEMA)[1:]])
    batch = rows(0, [3])
    batch = pa.record_batch([pa.array(["x"]), *batch.columns[1:]], schema=other)
    with pytest.raises(SinkError, match=r"column 'id' is \"long\" in the table"):
        sink(table, merge_schema=True).commit(
            plan(1, {0: (3, 4)}), write_task(table, [batch], other), other
        )


def test_partition_columns(tmp_path: Path) -> None:
    table = tmp_path / "t"
    schema = SCHEMA.append(pa.field("region", pa.string()))
    base = rows(0, range(6))
    batch = pa.record_batch(
        [*base.columns, pa.array(["eu", "us/west", "eu", None, "", "us/west"])], schema=schema
    )
    files = write_task(table, [batch], schema, ["region"])
    assert len(files) == 3  # one file per (Kafka partition, region); "" is null
    result = DeltaSink(str(table), "g1", partition_by=["region"]).commit(
        plan(0, {0: (0, 6)}), files, schema
    )
    assert result.files == 3
    assert DeltaTable(str(table)).metadata().partition_columns == ["region"]
    assert sorted(p.split("/")[0] for p in parquet_files(table)) == [
        "region=__HIVE_DEFAULT_PARTITION__",
        "region=eu",
        "region=us%2Fwest",
    ]
    got = sql(table, "SELECT region, count(*) AS n FROM t GROUP BY region ORDER BY region")
    assert {(r["region"], r["n"]) for r in got} == {("eu", 2), ("us/west", 2), (None, 2)}
    # The table's partition columns are taken when the option is not given, and a
    # different partitioning is refused.
    more = write_task(table, [pa.record_batch([*rows(0, [6]).columns, pa.array(["eu"])],
                                              schema=schema)], schema, ["region"])  # fmt: skip
    assert DeltaSink(str(table), "g1").commit(plan(1, {0: (6, 7)}), more, schema).rows == 1
    with pytest.raises(SinkError, match="partitioned by"):
        DeltaSink(str(table), "g1", partition_by=[]).commit(
            plan(2, {0: (7, 8)}), write_task(table, [rows(0, [7])]), SCHEMA
        )


def test_an_error_after_the_commit_landed_keeps_the_files(tmp_path: Path, monkeypatch) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 2)}), write_task(table, [rows(0, [0, 1])]), SCHEMA)
    real = DeltaTable.create_write_transaction

    def commit_then_fail(self, *args, **kw):
        real(self, *args, **kw)
        raise OSError("post-commit hook failed")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", commit_then_fail)
    files = write_task(table, [rows(0, [2, 3])])
    result = sink(table).commit(plan(1, {0: (2, 4)}), files, SCHEMA)
    assert result.rows == 2
    assert offsets_in(table, 0) == [0, 1, 2, 3]  # the files are in place and readable


def test_an_error_before_the_commit_deletes_the_files(tmp_path: Path, monkeypatch) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 2)}), write_task(table, [rows(0, [0, 1])]), SCHEMA)

    def fail(self, *args, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", fail)
    files = write_task(table, [rows(0, [2, 3])])
    with pytest.raises(SinkError, match="disk full"):
        sink(table).commit(plan(1, {0: (2, 4)}), files, SCHEMA)
    assert files[0].path not in parquet_files(table)
    assert committed_positions(str(table), "g1", [TP0]) == {TP0: 2}


def test_a_commit_that_failed_and_is_not_in_the_table_is_decided_and_tried_again(
    tmp_path: Path, monkeypatch
) -> None:
    """As delta-rs failing a commit because it listed the log while another writer's commit
    appeared ("Expected contiguous commit files, but found gap", 40 members on one table)."""
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 2)}), write_task(table, [rows(0, [0, 1])]), SCHEMA)
    real = DeltaTable.create_write_transaction
    calls = []

    def fail_once(self, *args, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("Expected contiguous commit files, but found gap")
        return real(self, *args, **kw)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", fail_once)
    result = sink(table).commit(plan(1, {0: (2, 4)}), write_task(table, [rows(0, [2, 3])]), SCHEMA)
    assert result.attempts == 2 and result.rows == 2
    assert offsets_in(table, 0) == [0, 1, 2, 3]


def test_two_writers_creating_the_table_at_once_share_it(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = {p: write_task(table, [rows(p, range(10))]) for p in (0, 1)}
    start = threading.Barrier(2)
    results: dict[int, object] = {}

    def first_batch(p: int) -> None:
        start.wait(10)
        try:
            results[p] = sink(table).commit(plan(0, {p: (0, 10)}), files[p], SCHEMA)
        except BaseException as exc:
            results[p] = exc

    threads = [threading.Thread(target=first_batch, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(not isinstance(r, BaseException) for r in results.values()), results
    assert offsets_in(table, 0) == list(range(10)) and offsets_in(table, 1) == list(range(10))
    creates = [h for h in DeltaTable(str(table)).history() if h["operation"] == "CREATE TABLE"]
    assert len(creates) == 1


# ---------------------------------------------------------------- the parts of a commit
# spark_groups.sink.staged, .table and .attempt, each on its own (still no Spark, no broker).


def test_staged_files_are_cut_once_per_offset_and_removed_unless_kept(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (mixed,) = write_task(table, [rows(0, range(5, 15)), rows(1, range(0, 3))])
    (above,) = write_task(table, [rows(0, range(15, 20))])
    staged = StagedFiles(SinkTable(str(table)), [mixed, above], "snappy")
    p0 = TP0

    cut = staged.cut(mixed, {p0: 10})  # p0 from 10; p1 left out
    assert cut is not None and cut.rows == 5
    assert cut.kafka == (KafkaRows(TOPIC, 0, 5, 10, 14),)
    assert staged.made == {cut.path}
    assert staged.cut(mixed, {p0: 10}) == cut  # a retry reuses the rewrite
    assert staged.cut(mixed, {p0: 15, TP1: 3}) is None  # nothing left
    assert len(parquet_files(table)) == 3

    staged.remove(keep={cut.path, above.path})
    assert parquet_files(table) == {cut.path, above.path}  # the original went, the cut stayed
    staged.remove()
    assert parquet_files(table) == set()


def test_staged_files_are_checked_against_the_plan(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = write_task(table, [rows(0, range(5))])
    with pytest.raises(SinkError, match="batch 2 lists a file twice"):
        StagedFiles(SinkTable(str(table)), files * 2, "snappy").check(plan(2, {0: (0, 5)}))
    StagedFiles(SinkTable(str(table)), files, "snappy").check(plan(2, {0: (0, 5)}))


def test_the_sink_table_is_created_nullable_and_refuses_other_columns(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = SinkTable(str(path))
    assert table.partition_columns() is None and table.load() is None
    required = pa.schema([pa.field("id", pa.int64(), nullable=False), *list(SCHEMA)[1:]])
    created = table.open(required, ())
    assert all(f.nullable for f in created.schema().to_arrow())  # every column nullable
    assert table.partition_columns() == ()
    assert table.partition_by_for(write_task(path, [rows(0, [0])])) == ()
    with pytest.raises(SinkError, match=r"partitioned by \[\], the query by \['id'\]"):
        table.open(SCHEMA, ("id",))

    other = tmp_path / "other"
    DeltaTable.create(str(other), required)  # made by another writer, with a NOT NULL column
    with pytest.raises(SinkError, match="'id' is NOT NULL in the table but nullable in the query"):
        SinkTable(str(other)).open(SCHEMA, ())
    with pytest.raises(SinkError, match="the query has no column 'id', which is NOT NULL"):
        SinkTable(str(other)).open(pa.schema(list(SCHEMA)[1:]), ())


def test_files_written_for_other_partition_columns_are_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = write_task(table, [rows(0, [0])])
    with pytest.raises(SinkError, match=r"written for partition columns \[\], the table is"):
        SinkTable(str(table), partition_by=("id",)).partition_by_for(files)


def attempt_on(table: Path, member: str = "test") -> CommitAttempt:
    return CommitAttempt(SinkTable(str(table)), "g1", member)


def test_an_attempt_on_a_stale_snapshot_of_the_same_partition_conflicts(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 5)}), write_task(table, [rows(0, range(5))]), SCHEMA)
    stale = DeltaTable(str(table))
    sink(table).commit(plan(1, {0: (5, 7)}), write_task(table, [rows(0, [5, 6])]), SCHEMA)

    files = write_task(table, [rows(0, [5, 6])])
    decision = BatchDecision(keep=files, txns={TP0: 7}, written={TP0: OffsetRange(TOPIC, 0, 5, 7)})
    assert attempt_on(table).attempt(stale, plan(1, {0: (5, 7)}), decision, ()) == "conflict"
    assert attempt_on(table).landed(decision) is False
    assert committed_positions(str(table), "g1", [TP0]) == {TP0: 7}


def test_an_attempt_commits_its_info_and_is_found_again(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {1: (0, 1)}), write_task(table, [rows(1, [0])]), SCHEMA)
    the_plan = plan(3, {0: (0, 4), 1: (1, 1)})
    decision = BatchDecision(
        keep=[], txns={TP0: 4}, written={TP0: OffsetRange(TOPIC, 0, 0, 4)}, dropped=[TP1]
    )
    me = attempt_on(table, member="m-1")
    assert me.landed(decision) is False
    assert me.attempt(DeltaTable(str(table)), the_plan, decision, ()) == "ok"
    assert me.landed(decision) is True  # no files: told by the transaction versions
    assert me.version_of(the_plan, decision) == 2
    entry = DeltaTable(str(table)).history(1)[0]
    assert {k: entry[k] for k in COMMIT_INFO_KEYS} == {
        k: v for k, v in me.info(the_plan, decision).items() if k in COMMIT_INFO_KEYS
    }
    assert entry["spark_groups.dropped"] == '["orders-1"]'
    assert json.loads(entry["userMetadata"]) == {"group": "g1", "txns": {TOPIC: {"0": 4}}}
    assert attempt_on(table, member="m-2").version_of(the_plan, decision) is None  # not m-2's
