"""The exactly-once Delta sink ``delta-group`` (docs/sink.md).

* :mod:`~spark_groups.sink.plan`: a batch's planned offset ranges, from Spark's checkpoint;
* :mod:`~spark_groups.sink.pipeline`: the table and group a batch is written for, said once by
  the source that planned it;
* :mod:`~spark_groups.sink.placement`: whether the executors can write the table where its
  path points;
* :mod:`~spark_groups.sink.writer`: executor side, a task's rows as Parquet files;
* :mod:`~spark_groups.sink.strategy`: a group or a share commit, chosen once per batch;
* :mod:`~spark_groups.sink.group_commit`: a ``kafka-group`` batch, driver side, the one
  compare-and-set Delta commit per batch, in order, made of :mod:`~spark_groups.sink.staged`
  (the batch's files: checked, cut, deleted), :mod:`~spark_groups.sink.sink_table` (opening the
  table, and :func:`committed_positions`: where it says each partition stands; the columns
  it may gain, :mod:`~spark_groups.sink.schema_changes`),
  :mod:`~spark_groups.sink.decision` (each partition against the table's versions) and
  :mod:`~spark_groups.sink.attempt` (one Delta commit on one snapshot), decided again after a
  concurrent commit by :mod:`~spark_groups.sink.retry`;
* :mod:`~spark_groups.sink.claim_tokens`: claim and release partitions in the table (a fencing
  token per partition), compare-and-set; :mod:`~spark_groups.sink.delta_arbiter`:
  ``DeltaArbiter``, the group's ``Arbiter`` on the table (positions and claims);
* :mod:`~spark_groups.sink.features`: which Delta table features of an existing table the
  sink can honour;
* :mod:`~spark_groups.sink.share_commit`: a ``kafka-share`` batch, deduplicated by the
  offsets the table's recent share commits wrote (:mod:`~spark_groups.sink.share_info`);
* :mod:`~spark_groups.sink.accepted_gaps`: ``accept_gap``, an operator's decision to leave a
  partition's missing records out of the table, recorded in it;
* :mod:`~spark_groups.sink.upkeep`: the table's upkeep beside the batches (checkpoints, log
  clean-up, compaction every ``compactEvery``, vacuum) and a new table's defaults, with
  :mod:`~spark_groups.sink.live_maintenance`: optimize and vacuum beside running members, under
  the maintenance lease;
* its options are :mod:`spark_groups.options.sink`;
* :mod:`~spark_groups.sink.spark`: the Spark adapter (the only module here importing Spark).
"""

from spark_groups.sink.group_commit import CommitResult, DeltaSink, committed_positions

__all__ = ["CommitResult", "DeltaSink", "committed_positions"]
