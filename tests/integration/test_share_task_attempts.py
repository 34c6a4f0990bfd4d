"""The Spark fact the kafka-share design stands on: a task's reader and writer agree on its name.

A Python stream reader and a Python stream writer of one query record the
:class:`~spark_groups.spark.task_context.TaskAttempt` each sees in its task; the sink's
commit-side check then finds, per task, the reader's name in the writer's message
(docs/share-groups.md, "Which attempt's output is in the table").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_groups.spark.task_context import TaskAttempt


def test_a_tasks_reader_and_writer_see_the_same_attempt(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        InputPartition,
        WriterCommitMessage,
    )

    folder = str(tmp_path / "seen")
    Path(folder).mkdir()

    def record(role: str) -> None:  # in the test: pickled by value to Spark's workers
        """Write the TaskAttempt this task sees into ``folder`` (a file per role and task)."""
        from pyspark import TaskContext

        attempt = TaskAttempt.current()
        context = TaskContext.get()
        assert attempt is not None and context is not None
        name = f"{role}-{context.partitionId()}.json"
        Path(folder, name).write_text(json.dumps(attempt.__dict__))

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"batch": 0}

        def latestOffset(self) -> dict:
            return {"batch": 1}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition(i) for i in range(3)]

        def read(self, partition: Any) -> Any:
            record("read")
            yield (partition.value,)

    class Writer(DataSourceStreamWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            assert len(list(iterator)) == 1
            record("write")
            return WriterCommitMessage()

        def commit(self, messages: list, batchId: int) -> None:
            pass

        def abort(self, messages: list, batchId: int) -> None:
            pass

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "attempt-probe"

        def schema(self) -> str:
            return "i int"

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

        def streamWriter(self, schema: Any, overwrite: bool) -> Writer:
            return Writer()

    spark.dataSource.register(Source)
    query = (
        spark.readStream.format("attempt-probe").load().filter("i >= 0")
        .writeStream.format("attempt-probe")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    seen = {p.name: json.loads(p.read_text()) for p in Path(folder).iterdir()}
    assert sorted(seen) == [f"{r}-{i}.json" for r in ("read", "write") for i in range(3)]
    for i in range(3):
        assert seen[f"read-{i}.json"] == seen[f"write-{i}.json"]
    attempts = {TaskAttempt(**seen[f"read-{i}.json"]) for i in range(3)}
    assert len(attempts) == 3
    assert {(a.run_id, a.batch_id) for a in attempts} == {(str(query.runId), 0)}
