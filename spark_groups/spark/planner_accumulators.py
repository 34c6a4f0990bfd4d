"""Spark 4.2+'s planner workers send no empty profiler accumulators of ours (SPARK-55161).

Since Spark 4.2 every driver-side Python planner worker sends back the two UDF-profiler
accumulators (ids -1 and -2, ``{}``), and ``spark-pipelines run`` then exits 1 after a
completed run. :func:`quiet` wraps the worker's ``send_accumulator_updates`` so that it leaves
those two out while they are empty and sends everything else; the data sources call it
whenever Spark gives a planner worker one of them (``__init__``, ``__setstate__``). Where the
function is not there (Spark 4.0, 4.1) it does nothing. docs/spark-versions.md,
"Declarative Pipelines".
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
