"""The sink's commit of kafka-share batches (spark_groups.sink.share_commit), on delta-rs
without Spark: records delivered twice land once, the commit names its task attempts, and a
commit call made again after it landed adds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_groups.errors import SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.share_commit import DUPLICATES_KEY, ShareCommit, ShareTaskOutput
from spark_groups.sink.share_info import COMMIT_OFFSETS_KEY, committed_attempts
from spark_groups.sink.sink_table import SinkTable
from spark_groups.spark.task_context import TaskAttempt

from sink_support import SCHEMA, TOPIC, offsets_in, rows, write_task


def task(
    table: Path, attempt: TaskAttempt, offsets: list[int], partition: int = 0
) -> ShareTaskOutput:
    """One task that read and wrote ``offsets`` of ``partition``."""
    files = write_task(table, [rows(partition, offsets)]) if offsets else []
    tp = TopicPartition(TOPIC, partition)
    return ShareTaskOutput(attempt, PartitionOffsets.of((tp, o) for o in offsets), tuple(files))


def committer(table: Path) -> ShareCommit:
    return ShareCommit(SinkTable(str(table)), "g", "m1", "snappy")


def share_plan(batch: int) -> BatchPlan:
    return BatchPlan(batch)


def test_records_delivered_again_land_once_and_the_commit_names_every_attempt(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t"
    a1, a2 = TaskAttempt("run", 0, 1), TaskAttempt("run", 0, 2)
    first = committer(table).commit(
        share_plan(0), [task(table, a1, list(range(0, 10))), task(table, a2, [10, 11])], SCHEMA
    )
    assert first.version == 1 and first.written.records() == 12 and not first.duplicates
    # Batch 1: 5..11 come back (a lock ran out after the write), with 12..14 that are new.
    b1 = TaskAttempt("run", 1, 3)
    second = committer(table).commit(share_plan(1), [task(table, b1, list(range(5, 15)))], SCHEMA)
    assert second.duplicates.records() == 7
    assert offsets_in(table) == list(range(15))
    info = DeltaTable(str(table)).history(1)[0]
    assert committed_attempts(info) == ("run", 1, frozenset({3}))
    assert json.loads(info[COMMIT_OFFSETS_KEY]) == {TOPIC: {"0": [[12, 15]]}}
    assert info[DUPLICATES_KEY] == "7"
    # Only the rewritten file and the first batch's are in the table; nothing else is left.
    assert len(DeltaTable(str(table)).file_uris()) == 3
    assert len(list(table.glob("*.parquet"))) == 3


def test_a_commit_call_made_again_after_it_landed_adds_nothing(tmp_path: Path) -> None:
    table = tmp_path / "t"
    outputs = [task(table, TaskAttempt("run", 4, 9), [0, 1, 2])]
    assert committer(table).commit(share_plan(4), outputs, SCHEMA).version == 1
    again = committer(table).commit(share_plan(4), outputs, SCHEMA)
    assert again.version is None
    assert offsets_in(table) == [0, 1, 2]
    assert DeltaTable(str(table)).version() == 1


def test_a_batch_of_duplicates_only_still_commits_to_name_its_attempts(tmp_path: Path) -> None:
    table = tmp_path / "t"
    committer(table).commit(share_plan(0), [task(table, TaskAttempt("r", 0, 1), [0, 1])], SCHEMA)
    result = committer(table).commit(
        share_plan(1), [task(table, TaskAttempt("r", 1, 2), [0, 1])], SCHEMA
    )
    assert result.version == 2 and result.duplicates.records() == 2
    assert committed_attempts(DeltaTable(str(table)).history(1)[0]) == ("r", 1, frozenset({2}))
    assert offsets_in(table) == [0, 1]


def test_a_missing_file_refuses_the_batch_and_deletes_the_others(tmp_path: Path) -> None:
    table = tmp_path / "t"
    good = task(table, TaskAttempt("r", 0, 1), [0, 1])
    gone = task(table, TaskAttempt("r", 0, 2), [2, 3])
    (table / gone.files[0].path).unlink()
    with pytest.raises(SinkError, match="not as written"):
        committer(table).commit(share_plan(0), [good, gone], SCHEMA)
    assert not list(table.glob("*.parquet"))


def test_a_concurrent_share_commit_of_the_same_partition_is_decided_again(
    tmp_path: Path,
) -> None:
    """Two writers read offset 7 (one delivery each, the lock ran out in between); the one
    that commits second sees the first's commit after its conflict and leaves 7 out."""
    table = tmp_path / "t"
    committer(table).commit(share_plan(0), [task(table, TaskAttempt("a", 0, 1), [0])], SCHEMA)
    late = ShareCommit(SinkTable(str(table)), "g", "m2", "snappy")
    theirs = [task(table, TaskAttempt("b", 0, 5), [7, 8])]
    mine = [task(table, TaskAttempt("a", 1, 2), [7])]
    calls = {"n": 0}
    original = late._attempt

    def other_writer_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:  # between m2's decision and its commit, m1 commits 7 and 8
            committer(table).commit(share_plan(0), theirs, SCHEMA)
        return original(*args, **kwargs)

    late._attempt = other_writer_first  # type: ignore[method-assign]
    result = late.commit(share_plan(1), mine, SCHEMA)
    assert calls["n"] == 2, "the first attempt should have met a conflict"
    assert result.duplicates.records() == 1
    assert offsets_in(table) == [0, 7, 8]
    assert pa.table(DeltaTable(str(table)).to_pyarrow_table()).num_rows == 3


def test_two_tasks_of_one_batch_holding_one_record_write_it_once(tmp_path: Path) -> None:
    """A record whose lock ran out under one task is given to another task of the same
    batch (seen on the broker: delivery count 2 beside count 1): the batch writes it once."""
    table = tmp_path / "t"
    first = task(table, TaskAttempt("r", 0, 1), [0, 1, 2, 3])
    again = task(table, TaskAttempt("r", 0, 2), [2, 3, 4])
    result = committer(table).commit(share_plan(0), [first, again], SCHEMA)
    assert offsets_in(table) == [0, 1, 2, 3, 4]
    assert result.duplicates.records() == 2
    assert result.written.records() == 5
