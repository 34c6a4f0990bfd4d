"""The sink's commit strategy (spark_groups.sink.strategy): chosen from a batch's source
offsets, and what each strategy's tasks add to their files, without Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_groups.errors import SinkError
from spark_groups.offsets import BatchOffset, OffsetRange, Pipeline
from spark_groups.sink.group_commit import GroupStrategy
from spark_groups.sink.plan import parse_offset_log
from spark_groups.sink.share_commit import ShareStrategy, ShareTaskOutput
from spark_groups.sink.strategy import strategy_for
from spark_groups.sink.writer import TaskFileWriter
from spark_groups.spark import task_context
from spark_groups.spark.task_context import TaskAttempt, note_read

from sink_support import SCHEMA, TOPIC, rows

GROUP = BatchOffset.of(3, [OffsetRange(TOPIC, 0, 0, 5)], pipeline=Pipeline("g", "/t"))
SHARE = BatchOffset(batch=3, pipeline=Pipeline("g", "/t"), share=True)


def offset_log(*offsets: BatchOffset) -> str:
    return "v1\n{}\n" + "\n".join(json.dumps(o.to_json()) for o in offsets) + "\n"


def test_the_strategy_follows_the_source_offsets_and_the_plan_keeps_them() -> None:
    assert isinstance(strategy_for([GROUP]), GroupStrategy)
    assert isinstance(strategy_for([]), GroupStrategy)  # nothing logged yet
    assert isinstance(strategy_for([SHARE]), ShareStrategy)
    for offset, kind in ((GROUP, "kafka-group"), (SHARE, "kafka-share")):
        plan = parse_offset_log(offset_log(offset), 3)
        assert strategy_for(plan.offsets).source == kind
    with pytest.raises(SinkError, match="a kafka-share and a kafka-group source"):
        parse_offset_log(offset_log(GROUP, SHARE), 3)


def test_a_group_task_adds_nothing_to_its_files(tmp_path: Path) -> None:
    writer = TaskFileWriter(str(tmp_path / "t"), SCHEMA)
    files, note = GroupStrategy().write_task(writer, iter([rows(0, range(5))]))
    assert note is None and [f.rows for f in files] == [5]


def test_a_share_task_notes_its_attempt_and_offsets_or_refuses_rows_it_did_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "t"
    attempt = TaskAttempt("run-a", 0, 7)
    with pytest.raises(SinkError, match="outside a streaming batch's task"):
        ShareStrategy().write_task(TaskFileWriter(str(table), SCHEMA), iter([rows(0, [1])]))
    monkeypatch.setattr(task_context.TaskAttempt, "current", classmethod(lambda cls: attempt))
    monkeypatch.setattr(task_context.tempfile, "gettempdir", lambda: str(tmp_path))
    note_read(attempt, 4)  # the reader of this very attempt acquired 4 records
    files, note = ShareStrategy().write_task(
        TaskFileWriter(str(table), SCHEMA), iter([rows(0, [1, 2]), rows(1, [9])])
    )
    assert isinstance(note, ShareTaskOutput) and note.attempt == attempt and note.acquired == 4
    assert note.offsets.to_json() == {TOPIC: {"0": [[1, 3]], "1": [[9, 10]]}}
    assert note.files == tuple(files)
    # The note is taken: a second write of the attempt comes through a shuffle.
    with pytest.raises(SinkError, match="were not read by the same task"):
        ShareStrategy().write_task(TaskFileWriter(str(table), SCHEMA), iter([rows(0, [5])]))
    assert sorted(p.name for p in table.glob("*.parquet")) == sorted(f.path for f in files)
