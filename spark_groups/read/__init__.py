"""The executor side of the source: exact offset ranges read into Arrow record batches.

* :mod:`~spark_groups.read.reader`: ``read_range`` and its per-process consumer pool;
* :mod:`~spark_groups.read.schema`: the source's columns (those of Spark's kafka source).
"""
