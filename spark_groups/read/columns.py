"""Arrow columns of read records: chunks of librdkafka Messages into record batches.

The columns and values of Spark's built-in kafka source, but for a record without a
timestamp, whose ``timestamp`` is null (docs/options.md, "Columns"). Each ``consume()`` chunk
is turned into column values at once and its Messages dropped (:func:`consume_chunk` sizes
the chunks), so the garbage collector does not run.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_groups.kafka.client import Message
from spark_groups.offsets import OffsetRange
from spark_groups.read.schema import HEADER_TYPE

#: Most messages asked of one ``consume()`` call, as a share of the garbage collector's
#: generation-0 threshold (700 by default). Each chunk is turned into column values and its
#: Messages freed before the next one, so the count of live GC-tracked objects never reaches
#: the threshold and no collection runs at all (larger chunks promote the Messages and lead
#: to full collections).
_CHUNK_SHARE_OF_GC_THRESHOLD = 0.7
_CHUNK_MIN, _CHUNK_MAX = 100, 10_000

# librdkafka's timestamp types (confluent_kafka.TIMESTAMP_*) are Kafka's ids + 1.
_TS_NOT_AVAILABLE = 0

_TS_US_UTC = pa.timestamp("us", tz="UTC")
_TS_MS_UTC = pa.timestamp("ms", tz="UTC")

_msg_key = Message.key
_msg_value = Message.value
_msg_timestamp = Message.timestamp
_msg_headers = Message.headers
_first = itemgetter(0)
_second = itemgetter(1)


class Constants:
    """Constant columns (topic, partition, timestampType) of one range, built once per length."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[Any, pa.DataType, int], pa.Array] = {}

    def get(self, value: Any, arrow_type: pa.DataType, n: int) -> pa.Array:
        """``n`` times ``value`` as ``arrow_type``, built once per value, type and length."""
        key = (value, arrow_type, n)
        array = self._arrays.get(key)
        if array is None:
            if len(self._arrays) > 16:
                self._arrays.clear()
            array = self._arrays[key] = pa.repeat(pa.scalar(value, arrow_type), n)
        return array


def consume_chunk() -> int:
    """How many messages to ask of one ``consume()`` call in this process (see
    ``_CHUNK_SHARE_OF_GC_THRESHOLD``)."""
    threshold = gc.get_threshold()[0] if gc.isenabled() else _CHUNK_MAX
    if threshold <= 0:  # collections off
        return _CHUNK_MAX
    return max(_CHUNK_MIN, min(_CHUNK_MAX, int(threshold * _CHUNK_SHARE_OF_GC_THRESHOLD)))


class Columns:
    """The column values of one batch as plain Python lists, filled chunk by chunk.

    Each ``consume()`` chunk is turned into column values at once and its Message objects
    dropped: Messages held until a batch is full survive into the oldest GC generation and set
    off full collections.

    A batch may hold the records of several ranges (partitions): ``runs`` and ``counts`` say
    which range's records come in which order (the index of the range in the task, and how
    many rows in a row), from which the ``topic`` and ``partition`` columns are built."""

    __slots__ = (
        "counts",
        "headers",
        "keys",
        "millis",
        "offsets",
        "rows",
        "runs",
        "types",
        "values",
    )

    def __init__(self, include_headers: bool) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.types: list[int] = []
        self.millis: list[int] = []
        self.headers: list[Any] | None = [] if include_headers else None
        self.offsets: list[np.ndarray] = []
        self.runs: list[int] = []
        self.counts: list[int] = []
        self.rows = 0

    def add(self, msgs: list[Message], offsets: np.ndarray, index: int) -> None:
        """Append the records ``msgs`` of the task's range ``index``; ``offsets`` are theirs."""
        n = len(msgs)
        self.keys += map(_msg_key, msgs)
        self.values += map(_msg_value, msgs)
        pairs = list(map(_msg_timestamp, msgs))  # (librdkafka type, ms); zip(*) is slower
        self.types += map(_first, pairs)
        self.millis += map(_second, pairs)
        if self.headers is not None:
            self.headers += map(_msg_headers, msgs)
        self.offsets.append(offsets)
        if self.runs and self.runs[-1] == index:
            self.counts[-1] += n
        else:
            self.runs.append(index)
            self.counts.append(n)
        self.rows += n

    def to_batch(
        self, ranges: Sequence[OffsetRange], schema: pa.Schema, constants: Constants
    ) -> pa.RecordBatch:
        """The Arrow record batch of everything added (``ranges``: the task's ranges)."""
        n, types = self.rows, self.types
        offsets = self.offsets[0] if len(self.offsets) == 1 else np.concatenate(self.offsets)
        timestamp = pa.array(self.millis, _TS_MS_UTC).cast(_TS_US_UTC)
        if types.count(types[0]) == n:  # the usual case: one timestamp type for all records
            kind = types[0]
            timestamp_type = constants.get(kind - 1, pa.int32(), n)
            if kind == _TS_NOT_AVAILABLE:
                timestamp = pa.nulls(n, _TS_US_UTC)
        else:
            raw = pa.array(types, pa.int32())
            timestamp_type = pc.subtract(raw, 1)
            if _TS_NOT_AVAILABLE in types:
                timestamp = pc.if_else(pc.equal(raw, _TS_NOT_AVAILABLE), None, timestamp)
        topic, partition = self._topic_and_partition(ranges, constants)
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            topic,
            partition,
            pa.array(offsets, pa.int64()),
            timestamp,
            timestamp_type,
        ]
        if self.headers is not None:
            if self.headers.count(None) == n:
                columns.append(pa.nulls(n, HEADER_TYPE))
            else:
                columns.append(pa.array(self.headers, HEADER_TYPE))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _topic_and_partition(
        self, ranges: Sequence[OffsetRange], constants: Constants
    ) -> tuple[pa.Array, pa.Array]:
        n = self.rows
        of_runs = [ranges[i] for i in self.runs]
        first = of_runs[0]
        if len(of_runs) == 1:  # one range: constant columns
            return (
                constants.get(first.topic, pa.string(), n),
                constants.get(first.partition, pa.int32(), n),
            )
        counts = np.array(self.counts, np.int64)
        partition = pa.array(
            np.repeat(np.array([r.partition for r in of_runs], np.int32), counts), pa.int32()
        )
        topics = [r.topic for r in of_runs]
        if topics.count(first.topic) == len(topics):
            return constants.get(first.topic, pa.string(), n), partition
        names = sorted(set(topics))
        ids = np.repeat(np.array([names.index(t) for t in topics], np.int32), counts)
        return pa.array(names, pa.string()).take(pa.array(ids)), partition
