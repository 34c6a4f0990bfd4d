"""The executor read path: exactly the records ``[from, until)`` of a task's ranges, as Arrow.

:func:`read_ranges` (and :func:`read_range`, its one-range case) runs in Spark's executor
Python workers; its parts are the other modules of :mod:`spark_groups.read`. The contract,
for each range on its own (a task's ranges are read on one consumer at once):

* How a range ends: at a record with offset ``>= until - 1``, or at an end-of-partition event
  at an offset ``>= until`` (the last offsets may hold no record a consumer receives:
  compacted away, transaction markers, aborted records). Records at or past ``until`` are
  dropped.
* When it cannot end: no progress for ``poll_timeout_s``, or an out-of-range offset (deleted
  by retention), is :class:`~spark_groups.errors.DataLossError`, or with
  ``fail_on_data_loss=False`` a warning (reading on from the log start where there is one);
  a stall with the broker unreachable is :class:`~spark_groups.errors.BrokerUnreachableError`
  either way (an outage is no reason to skip records).

Messages name topic, partition, offsets and bootstrap servers only, never configuration
values. The read path logs under ``spark_groups.read.reader``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

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


class TaskDecoding(Protocol):
    """How one task's batches are decoded (:class:`spark_groups.formats.decoder.Decoding`)."""

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` decoded, without the records that cannot be."""
        ...

    def finish(self) -> None:
        """Called once every range is read, before the task ends."""
        ...


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
    decode: Callable[[], TaskDecoding] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[from_offset, until_offset)`` of each of ``ranges`` (one Spark
    task's; at most one range per partition) as Arrow record batches of at most
    ``max_batch_rows`` rows and the schema :func:`spark_groups.read.schema.arrow_schema`
    (``include_headers``); one batch may hold several ranges' records, each range's in offset
    order. When every range is empty nothing is yielded and no consumer is created. The
    consumer comes from (and goes back to) the worker's pool; it is unassigned when the ranges
    are done, also when the caller stops iterating early.

    Raises as the module doc says: :class:`DataLossError` (with ``fail_on_data_loss``),
    :class:`BrokerUnreachableError`, and :class:`SparkGroupsError` for other Kafka errors that
    retrying cannot fix (authorization, fatal client errors), each naming the partition and
    range at fault. ``read_path`` (the ``readPath`` option) is ``auto``, ``python`` or
    ``native`` (:mod:`spark_groups.read.native`); both paths give the same batches.
    ``decode`` makes the task's :class:`TaskDecoding` (``DecodePlan.decoding``: the batches
    then have its row schema, without the records it could not decode). Not
    thread-safe per call; separate calls on separate threads use separate consumers."""
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
    decoding = decode() if decode is not None else None
    try:
        if decoding is None:
            yield from task.run()
        else:
            for batch in task.run():
                yield decoding.decode(batch)
            decoding.finish()
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
