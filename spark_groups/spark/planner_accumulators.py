"""Spark 4.2 and 4.3 planner workers send two empty profiler accumulators; a Declarative
Pipelines run then exits 1 after it completed. This module keeps ours from sending them.

Since Spark 4.2 (SPARK-55161) every driver-side Python planner worker
(``pyspark.sql.worker.utils.worker_run``: the workers that create a Python data source, plan
its reads and commit its writes) registers the two UDF-profiler accumulators (ids -1 and -2,
value ``{}``) and sends them back, with or without a profiler. A Spark Connect server merges
them into the session and sends them to the client as the observed metrics
``__python_accumulator__`` when a command ends. ``spark-pipelines run`` reads its run's
events with ``SparkConnectClient.execute_command_as_iterator``, which raises
``[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__=...)`` on them:
the run prints "Run is COMPLETED", then the CLI exits 1 and a scheduler calls it failed. Any
Python data source in a pipeline does it (a 10-row ``SimpleDataSourceStreamReader`` too);
Spark 4.1 has no ``worker_run`` and exits 0. Evidence and the rerun command:
docs/spark-versions.md#declarative-pipelines.

:func:`quiet` wraps the planner worker's ``send_accumulator_updates`` so that it leaves out
the two profiler accumulators while they are empty, and sends everything else (a configured
profiler's results included). The data sources call it whenever Spark gives a planner
worker one of them (their ``__init__`` and ``__setstate__``), so it is in place before that
worker sends its accumulators. Where the function is not there (Spark 4.0, 4.1, or a
pyspark that changed it) it does nothing.
"""

from __future__ import annotations

from typing import IO, Any

#: Set on the wrapper, so that :func:`quiet` wraps once per process.
_MARK = "_spark_groups_leaves_out_empty_profilers"


def quiet() -> None:
    """In this (planner worker) process, send no empty profiler accumulator (module doc)."""
    try:
        import pyspark.sql.worker.utils as planner
        from pyspark.accumulators import SpecialAccumulatorIds, _accumulatorRegistry
    except ImportError:  # before Spark 4.2: no planner worker_run
        return
    send = getattr(planner, "send_accumulator_updates", None)
    if send is None or getattr(send, _MARK, False):
        return
    profilers: list[int] = [
        key
        for name in ("SQL_UDF_PROFIER", "SQL_UDF_PROFIER_V2")
        if isinstance(key := getattr(SpecialAccumulatorIds, name, None), int)
    ]

    def send_accumulator_updates(outfile: IO[Any]) -> None:
        for key in profilers:
            accumulator: Any = _accumulatorRegistry.get(key)
            if accumulator is not None and not accumulator._value:
                del _accumulatorRegistry[key]
        send(outfile)

    setattr(send_accumulator_updates, _MARK, True)
    planner.send_accumulator_updates = send_accumulator_updates
