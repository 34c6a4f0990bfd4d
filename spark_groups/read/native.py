"""The native read path: a task's ranges read by the C extension ``spark_groups.read._native``.

An optional accelerator of :func:`spark_groups.read.reader.read_ranges`, with the same output
and rules. C only keeps each range's records and fills the Arrow columns, without a Python
object per record; it hands back the events it meets, and :class:`NativeTaskRead` decides on
them as the Python path does (:mod:`~spark_groups.read.faults`) and checks for stalls.
:func:`use_native` picks the path from ``readPath`` and :data:`READ_PATH_ENV` (``python`` on
either wins; ``native`` requires this path), and says once per process, at INFO, which path
reads and why; a consumer configuration with values other than text, numbers and booleans
(Python callbacks) is read by the Python path. librdkafka is not linked: :func:`available`
loads the one confluent-kafka ships. docs/architecture.md, "The executor read path".
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, get_args

import pyarrow as pa

from spark_groups.errors import SparkGroupsError
from spark_groups.kafka.client import (
    KafkaError,
    KafkaException,
    KafkaTopicPartition,
    librdkafka_path,
)
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.offsets import OffsetRange
from spark_groups.read.faults import Faults
from spark_groups.read.pool import PooledConsumer
from spark_groups.read.progress import RangeState, describe
from spark_groups.read.schema import arrow_schema
from spark_groups.secrets import scrub

try:
    from spark_groups.read import _native  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install time): the Python path
    _native = None

log = logging.getLogger(__name__)
# The read loop logs where the Python one does.
_read_log = logging.getLogger("spark_groups.read.reader")

#: The environment variable that picks the read path in every process: ``auto``, ``python``
#: or ``native`` (required).
READ_PATH_ENV = "SPARK_GROUPS_READ_PATH"
#: The values of the ``readPath`` option and of :data:`READ_PATH_ENV`: ``auto`` the native
#: path where it is built and loads, else Python; ``python`` always Python; ``native``
#: required (an error where it cannot load).
ReadPath = Literal["auto", "python", "native"]
READ_PATHS: tuple[str, ...] = get_args(ReadPath)

#: Longest time the C loop runs before Python looks at stalls (and signals) again.
_MAX_WAIT_S = 1.0
# The kinds of the events the extension hands back (_native.c: EV_*).
_CLIENT, _FETCH, _OUT_OF_RANGE, _LOG = 0, 1, 2, 3

_load_error: str | None = None  # None: not tried yet; "": loaded
_told: set[str] = set()


def available() -> bool:
    """Whether the native path can run in this process: the extension is built and librdkafka
    loads (tried once)."""
    return load_error() == ""


def load_error() -> str:
    """Why the native path cannot run here ("" when it can)."""
    global _load_error
    if _load_error is None:
        if _native is None:
            _load_error = "the C extension spark_groups.read._native is not built"
        else:
            path = librdkafka_path()
            try:
                if path is None:
                    raise ImportError("no librdkafka found")
                _native.load(path)
                _load_error = ""
                log.debug("native read path: librdkafka %s", path)
            except ImportError as exc:
                _load_error = f"librdkafka cannot be loaded: {exc}"
    return _load_error


def _once(text: str) -> None:
    if text not in _told:
        _told.add(text)
        log.info("%s", text)


def use_native(read_path: str, config: Mapping[str, Any]) -> bool:
    """Whether a task with the reader configuration ``config`` is read by the native path:
    ``read_path`` (the ``readPath`` option) and :data:`READ_PATH_ENV`, as the module doc says.
    Raises :class:`SparkGroupsError` when the native path is required but cannot load, and
    ``ValueError`` for a value other than :data:`READ_PATHS`."""
    env = os.environ.get(READ_PATH_ENV, "").strip().lower() or "auto"
    for name, value in (("read_path", read_path), (READ_PATH_ENV, env)):
        if value not in READ_PATHS:
            raise ValueError(f"{name} must be one of {', '.join(READ_PATHS)}, got {value!r}")
    if "python" in (read_path, env):
        source = "readPath=python" if read_path == "python" else f"{READ_PATH_ENV}=python"
        _once(f"the Python read path reads this process's tasks ({source})")
        return False
    why = load_error()
    if why:
        if "native" in (read_path, env):
            source = "readPath=native" if read_path == "native" else f"{READ_PATH_ENV}=native"
            raise SparkGroupsError(f"{source} requires the native read path, but {why}")
        _once(
            f"the Python read path reads this process's tasks: the native one is not available"
            f" ({why})"
        )
        return False
    python_only = sorted(k for k, v in config.items() if not isinstance(v, str | int | float))
    if python_only:
        _once(f"the Python read path reads tasks configured with {', '.join(python_only)}")
        return False
    _once("the native read path reads this process's tasks (spark_groups.read._native)")
    return True


class NativeConsumer:
    """A native consumer (``_native.Consumer``) with the few confluent-kafka ``Consumer``
    methods the pool and :class:`~spark_groups.read.faults.Faults` use."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        settings = {k: _text(v) for k, v in config.items()}
        try:
            self.native = _native.Consumer(settings)
        except ValueError as exc:  # a setting librdkafka refuses, as create_consumer says it
            raise SparkGroupsError(
                f"cannot create a Kafka consumer for {bootstrap_servers_of(config)}: "
                f"{scrub(str(exc), config)}"
            ) from None

    def get_watermark_offsets(
        self, partition: KafkaTopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        """The partition's low and high watermarks, as confluent-kafka's method gives them
        (``cached``: the last ones fetched); ``KafkaException`` when they cannot be had."""
        timeout_ms = -1 if cached else int((timeout if timeout is not None else 3600) * 1000)
        code, low, high = self.native.watermarks(partition.topic, partition.partition, timeout_ms)
        if code:
            text = KafkaError(code).str()
            raise KafkaException(KafkaError(code, f"Failed to get watermark offsets: {text}"))
        return low, high

    def unassign(self) -> None:
        """Stop fetching every partition (a pooled consumer's check-in)."""
        self.native.unassign()

    def close(self) -> None:
        """Close the consumer."""
        self.native.close()


def _text(value: Any) -> str:
    """A configuration value as librdkafka takes it (booleans as confluent-kafka writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class NativeTaskRead:
    """One :func:`~spark_groups.read.reader.read_ranges` call on the native path: its ranges,
    read on ``entry``'s :class:`NativeConsumer`; :meth:`run` yields the record batches. The
    counterpart of :class:`spark_groups.read.loop.TaskRead`, with the same rules."""

    def __init__(
        self,
        entry: PooledConsumer,
        config: Mapping[str, str],
        ranges: Sequence[OffsetRange],
        include_headers: bool,
        max_batch_rows: int,
        poll_timeout_s: float,
        fail_on_data_loss: bool,
    ) -> None:
        self.entry = entry
        self.native = entry.consumer.native
        self.include_headers = include_headers
        self.max_batch_rows = max_batch_rows
        self.poll_timeout_s = poll_timeout_s
        self.schema = arrow_schema(include_headers)
        self.states = [RangeState(r, i) for i, r in enumerate(ranges)]
        self.faults = Faults(entry, config, self.states, poll_timeout_s, fail_on_data_loss)

    def run(self) -> Iterator[pa.RecordBatch]:
        """Read every range to its end; yield record batches of at most ``max_batch_rows``."""
        native, states = self.native, self.states
        _read_log.debug("reading %s (native)", describe(states))
        native.assign([(s.topic, s.partition, s.next_offset, s.until) for s in states])
        address = native.address()
        next_stall_check = time.monotonic() + self.poll_timeout_s
        rows = 0
        while True:
            wait = min(_MAX_WAIT_S, max(0.0, next_stall_check - time.monotonic()))
            n = native.fill(self.max_batch_rows, self.include_headers, wait)
            batch = pa.RecordBatch._import_from_c(address, self.schema) if n > 0 else None
            events = native.events()
            if events:
                self._handle(events)
            if batch is not None:
                rows += n
                yield batch
            elif n < 0:
                break
            if time.monotonic() >= next_stall_check:
                next_stall_check = self._check_stalls()
        _read_log.debug("read %d records of %s (native)", rows, describe(states))

    def _sync(self) -> list[RangeState]:
        """Bring the ranges' progress over from C (for the decisions and their messages);
        return the unfinished ranges whose fetch offset the broker said is out of range."""
        now = time.monotonic()
        out_of_range = []
        for state, (offset, done, idle_s, lost) in zip(
            self.states, self.native.progress(), strict=True
        ):
            state.next_offset, state.done, state.last_progress = offset, bool(done), now - idle_s
            if lost and not done:
                out_of_range.append(state)
        return out_of_range

    def _handle(self, events: list[tuple[int, int, int, str, str | None]]) -> None:
        """The events of the last fill(), in the Python path's order: client errors (refused
        credentials raise), fetch errors (raise or pass), then out-of-range errors."""
        out_of_range = self._sync()
        for kind, _, code, text, _ in events:
            if kind == _CLIENT:
                self.entry.on_error(KafkaError(code, text))
            elif kind == _LOG:  # librdkafka's own line: its syslog level, "FACILITY text"
                facility, _, message = text.partition(" ")
                self.entry.log.syslog(code, facility, message)
        if self.entry.last_error is not None:
            self.faults.client_error()
        for kind, index, code, text, topic in events:
            if kind == _FETCH:
                state = self.states[index] if index >= 0 else None
                self.faults.fetch_error(KafkaError(code, text), state, topic)
        for state in out_of_range:
            self._out_of_range(state)

    def _out_of_range(self, state: RangeState) -> None:
        """The broker says ``state``'s fetch offset is out of range: lost records (raise, or
        skip them and read on from the log start, or give the range up)."""
        low = self.faults.out_of_range(state)
        if low is None:
            self.native.finish(state.index)
            state.done = True
        else:
            self.native.seek(state.index, low)
            state.next_offset, state.last_progress = low, time.monotonic()

    def _check_stalls(self) -> float:
        """Give every range without progress for ``poll_timeout_s`` to
        :meth:`Faults.stalled <spark_groups.read.faults.Faults.stalled>`; the next check's time."""
        self._sync()
        now, timeout = time.monotonic(), self.poll_timeout_s
        for state in self.states:
            if not state.done and now - state.last_progress >= timeout:
                self.faults.stalled(state)  # raises, or gives up on the rest of the range
                self.native.finish(state.index)
                state.done = True
        waiting = [s.last_progress for s in self.states if not s.done]
        return min(waiting) + timeout if waiting else now + timeout
