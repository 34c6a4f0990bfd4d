"""What a Spark task's ``TaskContext`` says about the streaming batch it runs for.

Spark sets local properties on each micro-batch's job, which every task of it sees, in every
Python worker of the task (its reader's and its writer's alike; measured on pyspark 4.0 to
4.3, docs/share-groups.md).
"""

from __future__ import annotations

#: The query run's id (StreamExecution runs each batch's job in a job group named by it).
RUN_ID_PROPERTY = "spark.jobGroup.id"
#: The micro-batch's id (MicroBatchExecution.BATCH_ID_KEY).
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def streaming_task() -> tuple[str, int, int] | None:
    """The running task's (run id, batch id, task attempt id), or None outside a streaming
    batch's task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    run_id = context.getLocalProperty(RUN_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not run_id or batch_id is None or not batch_id.isdigit():
        return None
    return run_id, int(batch_id), context.taskAttemptId()
