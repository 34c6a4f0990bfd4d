"""The executor side of the source: exact offset ranges read into Arrow record batches.

* :mod:`~spark_groups.read.tasks`: a batch's ranges packed into Spark tasks (pure; planned on
  the driver);
* :mod:`~spark_groups.read.reader`: ``read_ranges`` (a task's ranges on one consumer),
  ``read_range`` and the per-process consumer pool;
* :mod:`~spark_groups.read.schema`: the source's columns (those of Spark's kafka source).
"""
