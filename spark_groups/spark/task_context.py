"""What a task's ``TaskContext`` says about its streaming batch, and the note its reader leaves.

Spark sets local properties on each micro-batch's job, which every Python worker of a task
sees (its reader's and its writer's alike): :class:`TaskAttempt` names one task attempt the
same in both. docs/share-groups.md, "Durable before ACCEPT".
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: The query run's id (StreamExecution runs each batch's job in a job group named by it).
RUN_ID_PROPERTY = "spark.jobGroup.id"
#: The micro-batch's id (MicroBatchExecution.BATCH_ID_KEY).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Where a reading task leaves its note for the writer of the same task (a folder of the
#: host's temporary directory: the reader and the writer of one task run on one host).
NOTES_DIR = "spark_groups-share-reads"


@dataclass(frozen=True, order=True)
class TaskAttempt:
    """One attempt of one task of one batch of one run of a streaming query."""

    #: The query run's id (new at each start of the query).
    run_id: str
    #: The micro-batch's id.
    batch_id: int
    #: Spark's task attempt id, unique within the application.
    attempt_id: int

    @classmethod
    def current(cls) -> TaskAttempt | None:
        """The attempt running this code, or None outside a streaming batch's task."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return None
        run_id = context.getLocalProperty(RUN_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if not run_id or batch_id is None or not batch_id.isdigit():
            return None
        return cls(run_id, int(batch_id), context.taskAttemptId())

    def __str__(self) -> str:
        return f"run {self.run_id} batch {self.batch_id} task attempt {self.attempt_id}"


def _note_path(attempt: TaskAttempt) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in attempt.run_id)
    return Path(tempfile.gettempdir()) / NOTES_DIR / f"{safe}-{attempt.attempt_id}.json"


def note_read(attempt: TaskAttempt, records: int) -> None:
    """The reader's note: ``attempt`` read ``records`` records (its writer takes it with
    :func:`take_read_note`)."""
    path = _note_path(attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"batch": attempt.batch_id, "records": records}))


def take_read_note(attempt: TaskAttempt) -> int | None:
    """How many records the reader of ``attempt`` acquired, from its note (then deleted);
    None when no reader of this attempt ran on this host: the rows come through a shuffle."""
    path = _note_path(attempt)
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return int(value["records"])
