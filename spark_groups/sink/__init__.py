"""The exactly-once Delta sink ``delta-group`` (docs/sink.md).

* :mod:`~spark_groups.sink.plan`: a batch's planned offset ranges, from Spark's checkpoint;
* :mod:`~spark_groups.sink.writer`: executor side, a task's rows as Parquet files;
* :mod:`~spark_groups.sink.commit`: driver side, the one compare-and-set Delta commit per
  batch, and :func:`committed_positions` (where the table says each partition stands);
* :mod:`~spark_groups.sink.gaps`: ``accept_gap``, an operator's decision to leave a
  partition's missing records out of the table, recorded in it;
* :mod:`~spark_groups.sink.options`: the sink's options;
* :mod:`~spark_groups.sink.spark`: the Spark adapter (the only module here importing Spark).
"""

from spark_groups.sink.commit import CommitResult, DeltaSink, committed_positions

__all__ = ["CommitResult", "DeltaSink", "committed_positions"]
