"""What the Spark adapters share: what the running pyspark offers
(:mod:`~spark_groups.spark.compat`) and logging in Spark's Python workers
(:mod:`~spark_groups.spark.worker_logging`).

The adapters are :mod:`spark_groups.source` (the ``kafka-group`` source) and
:mod:`spark_groups.sink.spark` (the ``delta-group`` sink). Only they and ``compat`` import
Spark (and :mod:`spark_groups.deadletter`, inside its functions); everything they adapt is
plain Python, tested without a JVM.
"""
