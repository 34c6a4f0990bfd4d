"""The name of one Spark task attempt of a streaming batch, as its reader and its writer see it.

A ``kafka-share`` record may be acknowledged only after the batch that read it is in the
sink's table, and only the attempt whose output the table holds may ACCEPT its records (a
failed or speculative attempt RELEASEs them). The reading and the writing of a task run in
two Python workers of one Spark task; both see its ``TaskContext``: the task attempt id and
the streaming local properties Spark sets for the batch's job (measured on pyspark 4.3.0;
docs/share-groups.md). :class:`TaskAttempt` is that name: the writer puts it in its commit
message, the sink's commit lists the names whose files it committed
(:data:`COMMIT_INFO_KEY`), and the reader's waiting thread matches its own.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The key of the sink commit's info that lists the share task attempts it committed:
#: ``{"run": run id, "batch": batch id, "attempts": [task attempt id, ...]}``.
COMMIT_INFO_KEY = "spark_groups.share.attempts"


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
        from spark_groups.spark.task_context import streaming_task

        found = streaming_task()
        return None if found is None else cls(*found)

    def __str__(self) -> str:
        return f"run {self.run_id} batch {self.batch_id} task attempt {self.attempt_id}"


def commit_info(attempts: Iterable[TaskAttempt]) -> dict[str, str]:
    """The sink commit's info entry naming ``attempts`` (all of one run and batch)."""
    attempts = sorted(set(attempts))
    if not attempts:
        return {}
    runs = {(a.run_id, a.batch_id) for a in attempts}
    if len(runs) != 1:
        raise ValueError(f"one commit holds one run's batch, not {sorted(runs)}")
    ((run_id, batch_id),) = runs
    value = {"run": run_id, "batch": batch_id, "attempts": [a.attempt_id for a in attempts]}
    return {COMMIT_INFO_KEY: json.dumps(value, separators=(",", ":"))}


def committed_attempts(info: Mapping[str, object]) -> tuple[str, int, frozenset[int]] | None:
    """From one commit's info: its run id, batch id and committed task attempt ids; None
    for a commit that is not a share batch's."""
    text = info.get(COMMIT_INFO_KEY)
    if not isinstance(text, str):
        return None
    value = json.loads(text)
    return str(value["run"]), int(value["batch"]), frozenset(int(a) for a in value["attempts"])


#: Where a reading task leaves its note for the writer of the same task (a folder of the
#: host's temporary directory: the reader and the writer of one task run on one host).
NOTES_DIR = "spark_groups-share-reads"


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
