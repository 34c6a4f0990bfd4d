"""Prototype (issue 26): the executor read path in C, Arrow columns without a Python object
per record. Not part of spark_groups; build with ``python3 bench/native_read/build.py``.

    from bench.native_read import read_ranges
    for batch in read_ranges(config, [(topic, partition, from_, until)], 10_000): ...

Same output schema as :func:`spark_groups.read.reader.read_ranges` (``arrow_schema``). The
librdkafka used is the one inside confluent-kafka's wheel (the same build both paths use).
Where the extension is not built or cannot load, :func:`read_ranges` falls back to the
pure-Python path (``available()`` says which one runs).

Left out of the prototype: data-loss handling beyond raising (``failOnDataLoss=false``,
broker-unreachable diagnosis, authentication errors), error_cb, fork safety of the pool.
Control records and aborted transactions need nothing: librdkafka never hands them over,
and a range whose last offsets hold none ends on the next record or the end-of-partition event,
as in the Python reader.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

try:
    from bench.native_read import _native
except ImportError:  # not built: the pure-Python path
    _native = None

_LOAD_ERROR: str | None = None
_POOL: dict[tuple[tuple[str, str], ...], list[Any]] = {}


def librdkafka_path() -> str | None:
    """The librdkafka confluent-kafka's wheel ships (or a system one)."""
    import ctypes.util

    import confluent_kafka

    here = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    for pattern in ("confluent_kafka.libs/librdkafka*.so*", ".dylibs/librdkafka*.dylib"):
        found = sorted(glob.glob(os.path.join(here, os.pardir, pattern)))
        found += sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    return ctypes.util.find_library("rdkafka")


def available() -> bool:
    """Whether the native path runs (else :func:`read_ranges` is the pure-Python one)."""
    global _LOAD_ERROR, _native
    if _native is None:
        return False
    if _LOAD_ERROR is None:
        try:
            path = librdkafka_path()
            if path is None:
                raise ImportError("no librdkafka found")
            _native.load(path)
            _LOAD_ERROR = ""
        except ImportError as exc:
            _LOAD_ERROR = str(exc)
    return _LOAD_ERROR == ""


def _config(config: Mapping[str, Any]) -> dict[str, str]:
    from spark_groups.read.reader import reader_config

    return {k: v for k, v in reader_config(config).items() if not callable(v)}


def read_ranges(
    config: Mapping[str, Any],
    ranges: Sequence[tuple[str, int, int, int]],
    batch_rows: int = 10_000,
    *,
    include_headers: bool = False,
    poll_timeout_s: float = 120.0,
) -> Iterator[pa.RecordBatch]:
    """The records ``[from, until)`` of each ``(topic, partition, from, until)`` as Arrow
    record batches of at most ``batch_rows`` rows (the reader's schema and librdkafka
    settings: defaults < ``config`` < required)."""
    if not available():
        yield from _python_read_ranges(config, ranges, batch_rows, include_headers, poll_timeout_s)
        return
    settings = _config(config)
    key = tuple(sorted((k, str(v)) for k, v in settings.items()))
    idle = _POOL.setdefault(key, [])
    consumer = idle.pop() if idle else _native.Consumer(settings)
    healthy = False
    try:
        consumer.assign(list(ranges))
        array_ptr, schema_ptr = consumer.addresses()
        while consumer.next_batch(batch_rows, include_headers, poll_timeout_s):
            yield pa.RecordBatch._import_from_c(array_ptr, schema_ptr)
        healthy = True
    except GeneratorExit:
        healthy = True
        raise
    finally:
        if healthy:
            consumer.unassign()
            idle.append(consumer)
        else:
            consumer.close()


def _python_read_ranges(
    config: Mapping[str, Any],
    ranges: Sequence[tuple[str, int, int, int]],
    batch_rows: int,
    include_headers: bool,
    poll_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    from spark_groups.offsets import OffsetRange
    from spark_groups.read.reader import read_ranges as python_read_ranges

    yield from python_read_ranges(
        config,
        [OffsetRange(*r) for r in ranges],
        include_headers=include_headers,
        max_batch_rows=batch_rows,
        poll_timeout_s=poll_timeout_s,
    )


def close_cached_consumers() -> None:
    for idle in _POOL.values():
        for consumer in idle:
            consumer.close()
    _POOL.clear()
