"""What the Spark adapters share: the format names Spark knows them by, and the modules below.

* :mod:`~spark_groups.spark.compat`: what the running pyspark offers (admission control, the
  Arrow stream writer, Arrow types in UTC);
* :mod:`~spark_groups.spark.worker_logging`: logging in Spark's Python workers;
* :mod:`~spark_groups.spark.task_context`: ``TaskAttempt``, a task's streaming batch from its
  ``TaskContext``, and the note a ``kafka-share`` reader leaves the writer of its task;
* :mod:`~spark_groups.spark.redaction`: the schema registry's credentials redacted in plans;
* :mod:`~spark_groups.spark.planner_accumulators`: Spark 4.2+'s planner workers send no empty
  profiler accumulators (SPARK-55161).

The adapters are :mod:`spark_groups.sources` and :mod:`spark_groups.sink.spark`; only they,
this package and :mod:`spark_groups.deadletter`'s functions import Spark.
"""

#: The format name of the ``kafka-group`` source, for ``spark.readStream.format(...)``.
FORMAT = "kafka-group"
#: The format name of the exactly-once Delta sink, for ``df.writeStream.format(...)``.
SINK_FORMAT = "delta-group"
