"""The Spark adapter of the ``kafka-group`` source (the sink's is :mod:`spark_groups.sink.spark`).

Only adapters import Spark; everything they adapt is plain Python, tested without a JVM.
"""
