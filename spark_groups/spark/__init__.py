"""What the Spark adapters share: the format names Spark knows them by (``spark_groups``
exports them), what the running pyspark offers (:mod:`~spark_groups.spark.compat`) and
logging in Spark's Python workers (:mod:`~spark_groups.spark.worker_logging`).

The adapters are :mod:`spark_groups.sources` (the ``kafka-group`` and ``kafka-share``
sources) and :mod:`spark_groups.sink.spark` (the ``delta-group`` sink). Only they and
``compat`` import Spark (and :mod:`spark_groups.deadletter`, inside its functions);
everything they adapt is plain Python, tested without a JVM.
"""

#: The format name of the ``kafka-group`` source, for ``spark.readStream.format(...)``.
FORMAT = "kafka-group"
#: The format name of the exactly-once Delta sink, for ``df.writeStream.format(...)``.
SINK_FORMAT = "delta-group"
