"""The executor side of the source: exact offset ranges read into Arrow record batches.

* :mod:`~spark_groups.read.tasks`: a batch's ranges packed into Spark tasks (pure; planned on
  the driver);
* :mod:`~spark_groups.read.reader`: ``read_ranges`` (a task's ranges on one consumer) and
  ``read_range``, the entry points of the read path; its parts:
  :mod:`~spark_groups.read.pool` (the consumers and their per-process pool),
  :mod:`~spark_groups.read.loop` (a task's read loop), :mod:`~spark_groups.read.progress`
  (one range's progress), :mod:`~spark_groups.read.columns` (records into Arrow columns),
  :mod:`~spark_groups.read.events` (a chunk's error events),
  :mod:`~spark_groups.read.faults` (typed errors, stalls and data loss), and
  :mod:`~spark_groups.read.native`, the native path (its C extension fills the Arrow columns;
  used where it is built and loads, else the Python path runs);
* :mod:`~spark_groups.read.schema`: the source's columns (those of Spark's kafka source).
"""
