"""The executor read path: exactly the records ``[from, until)`` of each of a task's ranges,
as Arrow.

:func:`read_ranges` (and :func:`read_range`, its one-range case) runs inside Spark's executor
Python workers. Its parts, each a module of :mod:`spark_groups.read`:

* :mod:`~spark_groups.read.pool`: the consumers' configuration (:func:`reader_config`) and the
  pool that keeps them per worker process between tasks (:func:`close_cached_consumers`);
* :mod:`~spark_groups.read.loop`: the read loop of one task, which routes records to ranges;
* :mod:`~spark_groups.read.progress`: the progress of one range;
* :mod:`~spark_groups.read.columns`: records into Arrow columns (those of Spark's kafka source);
* :mod:`~spark_groups.read.events`: a chunk's end-of-partition and out-of-range events;
* :mod:`~spark_groups.read.faults`: Kafka errors as typed errors, stalls and data loss;
* :mod:`~spark_groups.read.native`: the native path, an optional accelerator of the read loop
  (C fills the Arrow columns; the decisions stay in Python): it runs when the C extension is
  built and loads, unless ``read_path`` or ``SPARK_GROUPS_READ_PATH`` says ``python``.

How a range ends
    A range ``[from, until)`` is complete when a record with offset ``>= until - 1`` has been
    seen, or when librdkafka reports the end of the partition (``enable.partition.eof``) at an
    offset ``>= until``. A record past ``until - 1`` and the second case cover ranges whose
    last offsets hold no record a consumer receives (compacted away, transaction markers,
    aborted records under ``read_committed``): a partition's records arrive in offset order,
    so none is left before them. Records at or past ``until`` are dropped.

When it cannot end
    * No progress for ``poll_timeout_s`` (the records are not there, or never arrive):
      :class:`~spark_groups.errors.DataLossError`, or with ``fail_on_data_loss=False`` a warning
      and the records read so far. If the broker cannot be reached at that point the error is
      :class:`~spark_groups.errors.BrokerUnreachableError` whatever ``fail_on_data_loss`` says:
      an outage is not a reason to skip records.
    * The broker says the offset is out of range (``auto.offset.reset=error``): offsets below the
      log start were deleted by retention. ``fail_on_data_loss=True`` raises
      :class:`~spark_groups.errors.DataLossError`; ``False`` logs a warning and carries on from the
      log start. Offsets beyond the log end are lost as a whole (raise, or warn and stop).

Several ranges
    A task's ranges (``spark_groups.read.tasks``) are read on one consumer at once: every
    partition is assigned at its range's start, records are routed to their range by topic and
    partition, and a partition is unassigned once its range is complete. Each rule above holds
    for each range on its own; errors name the range's partition.

Nothing here logs or raises configuration values; messages name topic, partition, offsets and
bootstrap servers only. The read path logs under ``spark_groups.read.reader``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa

from spark_groups import crash_points
from spark_groups.offsets import OffsetRange
from spark_groups.read.loop import TaskRead
from spark_groups.read.native import READ_PATHS, NativeTaskRead, use_native
from spark_groups.read.pool import (
    READER_DEFAULTS,
    READER_REQUIRED,
    checkin,
    checkout,
    close_cached_consumers,
    close_quietly,
    reader_config,
)

__all__ = [
    "READER_DEFAULTS",
    "READER_REQUIRED",
    "READ_PATHS",
    "TASKS_BY_PATH",
    "close_cached_consumers",
    "read_range",
    "read_ranges",
    "reader_config",
]

#: How many tasks each read path (``"python"``, ``"native"``) has read in this process.
TASKS_BY_PATH: Counter[str] = Counter()


def read_range(
    consumer_config: Mapping[str, str],
    rng: OffsetRange,
    *,
    include_headers: bool,
    max_batch_rows: int = 10_000,
    poll_timeout_s: float = 120.0,
    fail_on_data_loss: bool = True,
    read_path: str = "auto",
) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[rng.from_offset, rng.until_offset)`` as Arrow record batches:
    :func:`read_ranges` of this one range."""
    return read_ranges(
        consumer_config,
        (rng,),
        include_headers=include_headers,
        max_batch_rows=max_batch_rows,
        poll_timeout_s=poll_timeout_s,
        fail_on_data_loss=fail_on_data_loss,
        read_path=read_path,
    )


def read_ranges(
    consumer_config: Mapping[str, str],
    ranges: Sequence[OffsetRange],
    *,
    include_headers: bool,
    max_batch_rows: int = 10_000,
    poll_timeout_s: float = 120.0,
    fail_on_data_loss: bool = True,
    read_path: str = "auto",
) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[from_offset, until_offset)`` of each of ``ranges`` (one Spark
    task's; at most one range per partition) as Arrow record batches.

    One consumer reads all the ranges at once: every partition is assigned at its range's
    start, the records are routed to their range by topic and partition, and a partition
    stops being fetched (``incremental_unassign``) as soon as its range is complete. Each
    range ends, stalls and loses data on its own, as the module doc describes. Batches have
    at most ``max_batch_rows`` rows and the schema
    :func:`spark_groups.read.schema.arrow_schema` (``include_headers``); one batch may hold
    the records of several ranges, each range's records in offset order. Empty ranges are
    skipped; when every range is empty nothing is yielded and no consumer is created. The
    consumer comes from (and goes back to) a pool kept per worker process and configuration;
    it is unassigned when the ranges are done, also when the caller stops iterating early.

    Raises :class:`DataLossError` when records of a range cannot be read (deleted, or no
    progress within ``poll_timeout_s``) and ``fail_on_data_loss`` is set; otherwise those records
    are skipped with a warning. Raises :class:`BrokerUnreachableError` when a range stalls and
    the broker cannot be reached, and :class:`SparkGroupsError` for other Kafka errors that
    retrying cannot fix (authorization, fatal client errors). Each error names the partition
    and range at fault.

    ``read_path`` (the ``readPath`` option): ``auto`` reads on the native path
    (:mod:`spark_groups.read.native`) where it can, else on the Python one; ``python`` forces
    the Python path; ``native`` requires the native one. Both give the same batches.

    Not thread-safe per call; separate calls on separate threads use separate consumers.
    """
    if max_batch_rows < 1:
        raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")
    if read_path not in READ_PATHS:
        raise ValueError(f"read_path must be one of {', '.join(READ_PATHS)}, got {read_path!r}")
    work = tuple(r for r in ranges if r.until_offset > r.from_offset)
    if len({r.topic_partition for r in work}) != len(work):
        raise ValueError("read_ranges takes at most one range per partition")
    if not work:
        return
    config = reader_config(consumer_config)
    path = "native" if use_native(read_path, config) else "python"
    entry = checkout(config, path)
    task = (NativeTaskRead if path == "native" else TaskRead)(
        entry, config, work, include_headers, max_batch_rows, poll_timeout_s, fail_on_data_loss
    )
    TASKS_BY_PATH[path] += 1
    healthy = False
    try:
        yield from task.run()
        crash_points.reached("read")
        healthy = True
    except GeneratorExit:
        healthy = True  # the caller stopped early; the consumer itself is fine
        raise
    finally:
        if healthy:
            checkin(entry)
        else:
            close_quietly(entry)
