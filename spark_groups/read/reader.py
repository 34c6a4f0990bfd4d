"""The executor read path: exactly the records ``[from, until)`` of each of a task's ranges,
as Arrow.

:func:`read_ranges` (and :func:`read_range`, its one-range case) runs inside Spark's executor
Python workers. Those are forked from ``pyspark.daemon`` and reused between tasks, so the
Kafka consumers it uses are pooled per worker process and kept between tasks. The consumers
only ever assign partitions at explicit offsets: they never join a group, never commit and
never store offsets.

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

Columns
    Those of Spark's kafka source; :mod:`spark_groups.read.columns` says how each is filled.

Several ranges
    A task's ranges (``spark_groups.read.tasks``) are read on one consumer at once: every
    partition is assigned at its range's start, records are routed to their range by topic and
    partition, and a partition is unassigned once its range is complete. Each rule above holds
    for each range on its own; errors name the range's partition.

Nothing here logs or raises configuration values; messages name topic, partition, offsets and
bootstrap servers only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from spark_groups.errors import BrokerUnreachableError, DataLossError, SparkGroupsError
from spark_groups.kafka import auth
from spark_groups.kafka.client import KafkaError, KafkaException, KafkaTopicPartition, Message
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.kafka.errors import TRANSIENT_FETCH_CODES, UNREACHABLE_CODES, error_text
from spark_groups.kafka.secrets import scrub
from spark_groups.offsets import OffsetRange
from spark_groups.read.columns import Columns, Constants, consume_chunk
from spark_groups.read.pool import (
    READER_DEFAULTS,
    READER_REQUIRED,
    PooledConsumer,
    checkin,
    checkout,
    close_cached_consumers,
    close_quietly,
    reader_config,
)
from spark_groups.read.schema import arrow_schema

__all__ = [
    "READER_DEFAULTS",
    "READER_REQUIRED",
    "close_cached_consumers",
    "read_range",
    "read_ranges",
    "reader_config",
]

log = logging.getLogger(__name__)

#: Longest single wait inside ``consume()``; the overall wait is ``poll_timeout_s``.
_CONSUME_WAIT_S = 0.25
#: A task stops fetching the partitions of its finished ranges (``incremental_unassign``)
#: when this many are finished, or the first of them finished this long ago.
_UNASSIGN_BATCH = 64
_UNASSIGN_WAIT_S = 0.05
#: Longest wait for the watermarks asked at a deadline or an out-of-range error (also bounded
#: by poll_timeout_s); no answer means the broker is unreachable.
_PROBE_TIMEOUT_S = 10.0

_msg_error = Message.error
_msg_offset = Message.offset
_msg_partition = Message.partition
_msg_topic = Message.topic

# --------------------------------------------------------------------------- the read loop


def read_range(
    consumer_config: Mapping[str, str],
    rng: OffsetRange,
    *,
    include_headers: bool,
    max_batch_rows: int = 10_000,
    poll_timeout_s: float = 120.0,
    fail_on_data_loss: bool = True,
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
    )


def read_ranges(
    consumer_config: Mapping[str, str],
    ranges: Sequence[OffsetRange],
    *,
    include_headers: bool,
    max_batch_rows: int = 10_000,
    poll_timeout_s: float = 120.0,
    fail_on_data_loss: bool = True,
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

    Not thread-safe per call; separate calls on separate threads use separate consumers.
    """
    if max_batch_rows < 1:
        raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")
    work = tuple(r for r in ranges if r.until_offset > r.from_offset)
    if len({r.topic_partition for r in work}) != len(work):
        raise ValueError("read_ranges takes at most one range per partition")
    if not work:
        return
    config = reader_config(consumer_config)
    entry = checkout(config)
    healthy = False
    try:
        yield from _TaskRead(
            entry, config, work, include_headers, max_batch_rows, poll_timeout_s, fail_on_data_loss
        ).run()
        healthy = True
    except GeneratorExit:
        healthy = True  # the caller stopped early; the consumer itself is fine
        raise
    finally:
        if healthy:
            checkin(entry)
        else:
            close_quietly(entry)


class _Range:
    """The progress of one range of a task."""

    __slots__ = (
        "done",
        "from_offset",
        "index",
        "last_progress",
        "next_offset",
        "partition",
        "reassign_at",
        "rng",
        "topic",
        "until",
    )

    def __init__(self, rng: OffsetRange, index: int) -> None:
        self.rng = rng
        self.index = index
        self.topic = rng.topic
        self.partition = rng.partition
        self.from_offset = rng.from_offset
        self.until = rng.until_offset
        self.next_offset = rng.from_offset
        self.done = False
        self.reassign_at: int | None = None
        self.last_progress = 0.0

    def __str__(self) -> str:
        return f"{self.rng.topic_partition} [{self.from_offset}, {self.until})"


class _TaskRead:
    """The state of one :func:`read_ranges` call: its ranges, read on one consumer."""

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
        self.consumer = entry.consumer
        self.config = config
        self.ranges = tuple(ranges)
        self.include_headers = include_headers
        self.max_batch_rows = max_batch_rows
        self.poll_timeout_s = poll_timeout_s
        self.fail_on_data_loss = fail_on_data_loss
        self.schema = arrow_schema(include_headers)
        self.states = [_Range(r, i) for i, r in enumerate(self.ranges)]
        self.multi_topic = len({r.topic for r in self.ranges}) > 1
        # Records are routed by partition, or by (topic, partition) when topics differ.
        self.by_key: dict[Any, _Range] = {self._key(s.topic, s.partition): s for s in self.states}
        self.active = len(self.states)
        #: Offsets still to read over the unfinished ranges (bounds each consume() call).
        self.remaining = sum(s.until - s.next_offset for s in self.states)
        self.finished: list[_Range] = []  # done since the last incremental_unassign
        self.finished_since: float | None = None
        #: Records past a range's end arrived: stop fetching finished partitions now.
        self.past_end = False
        self.next_stall_check = 0.0

    def _key(self, topic: str | None, partition: int | None) -> Any:
        return (topic, partition) if self.multi_topic else partition

    def _state_of(self, msg: Message) -> _Range | None:
        state = self.by_key.get(self._key(msg.topic(), msg.partition()))
        if state is not None and state.topic != msg.topic():
            return None
        return state

    # -- main loop ---------------------------------------------------------------------------

    def run(self) -> Iterator[pa.RecordBatch]:
        states = self.states
        single = states[0] if len(states) == 1 else None
        consumer = self.consumer
        consume = consumer.consume
        entry = self.entry
        max_rows = self.max_batch_rows
        chunk = consume_chunk()
        log.debug("reading %s", self._what())
        consumer.incremental_assign(
            [KafkaTopicPartition(s.topic, s.partition, s.next_offset) for s in states]
        )
        now = time.monotonic()
        for s in states:
            s.last_progress = now
        self.next_stall_check = now + self.poll_timeout_s
        constants = Constants()
        pending = Columns(self.include_headers)
        rows = 0
        while self.active:
            want = min(max_rows - pending.rows, self.remaining, chunk)
            msgs = consume(want, _CONSUME_WAIT_S)
            if entry.last_error is not None:
                self._client_error()
            now = time.monotonic()
            events: _Events | None = None
            if msgs and any(map(_msg_error, msgs)):
                msgs, events = self._split_events(msgs)
            if msgs:
                if single is None:
                    self._route(msgs, pending, now)
                else:
                    # _take inlined for the hot path of one range: consecutive offsets.
                    n = len(msgs)
                    first, last = msgs[0].offset(), msgs[-1].offset()
                    nxt, until = single.next_offset, single.until
                    if (
                        nxt <= first < until
                        and last - first == n - 1
                        and msgs[0].partition() == single.partition
                    ):
                        if last >= until:
                            del msgs[until - first :]
                            last = until - 1
                        pending.add(msgs, np.arange(first, last + 1, dtype=np.int64), 0)
                        # _advance inlined
                        self.remaining -= last + 1 - nxt
                        single.next_offset = last + 1
                        single.last_progress = now
                        if last + 1 >= until:
                            self._finish(single, remaining=0)
                    else:
                        self._take(single, msgs, pending, now, False)
                del msgs
            if events is not None:
                self._apply_events(events, now)
            if self.finished:
                self._stop_fetching(now)
            if pending.rows and (pending.rows >= max_rows or not self.active):
                rows += pending.rows
                yield pending.to_batch(self.ranges, self.schema, constants)
                pending = Columns(self.include_headers)
            if self.active and now >= self.next_stall_check:
                self._check_stalls(now)
        if pending.rows:
            rows += pending.rows
            yield pending.to_batch(self.ranges, self.schema, constants)
        log.debug("read %d records of %s", rows, self._what())

    def _stop_fetching(self, now: float) -> None:
        """Unassign the partitions of finished ranges, a few at a time (each call costs about
        as much as reading a hundred records), but at once when records past a range's end
        arrive: until then they are fetched and dropped."""
        if not self.active:  # the last ones are unassigned with the rest, at check-in
            self.finished.clear()
            return
        if self.finished_since is None:
            self.finished_since = now
        if (
            not self.past_end
            and len(self.finished) < _UNASSIGN_BATCH
            and now - self.finished_since < _UNASSIGN_WAIT_S
        ):
            return
        self.past_end = False
        self.consumer.incremental_unassign(
            [KafkaTopicPartition(s.topic, s.partition) for s in self.finished]
        )
        self.finished.clear()
        self.finished_since = None

    def _take(
        self, state: _Range, msgs: list[Message], pending: Columns, now: float, trusted: bool
    ) -> None:
        """Add the records ``msgs`` to ``state``'s range; ``trusted``: they are all of its
        partition (else each is checked)."""
        if state.done:
            self.past_end = True
            return
        n = len(msgs)
        first, last = msgs[0].offset(), msgs[-1].offset()
        nxt, until = state.next_offset, state.until
        if trusted and first >= nxt and last - first == n - 1:
            # The usual case: consecutive offsets (a partition's offsets only grow).
            if first >= until:  # the offsets before it hold no record: the range is complete
                self.past_end = True
                self._advance(state, until, now)
                return
            if last >= until:
                self.past_end = True
                del msgs[until - first :]
                last = until - 1
            offsets = np.arange(first, last + 1, dtype=np.int64)
            beyond = False
        else:
            msgs, offsets, beyond = self._filter(state, msgs)
            if len(offsets) < n:
                self.past_end = True
        if len(offsets):
            pending.add(msgs, offsets, state.index)
            self._advance(state, int(offsets[-1]) + 1, now)
        if beyond and not state.done:
            # A record at or past the end: the offsets left before it hold no record (a
            # compacted gap, a transaction marker, aborted records), so the range is complete.
            self._advance(state, until, now)

    def _route(self, msgs: list[Message], pending: Columns, now: float) -> None:
        """Split a chunk of several ranges' records into runs of one partition each."""
        keys: list[Any] = list(map(_msg_partition, msgs))
        if self.multi_topic:
            keys = list(zip(map(_msg_topic, msgs), keys, strict=True))
        n = len(keys)
        key = keys[0]
        if keys.count(key) == n:  # one partition, the usual chunk
            state = self.by_key.get(key)
            if state is not None:
                self._take(state, msgs, pending, now, msgs[0].topic() == state.topic)
            return
        start = 0
        for i in [i for i in range(1, n) if keys[i] != keys[i - 1]] + [n]:
            state = self.by_key.get(keys[start])
            if state is not None:
                run = msgs[start:i]
                self._take(state, run, pending, now, run[0].topic() == state.topic)
            start = i

    def _advance(self, state: _Range, offset: int, now: float) -> None:
        """``state`` has read everything before ``offset``."""
        self.remaining -= min(offset, state.until) - state.next_offset
        state.next_offset = offset
        state.last_progress = now
        if offset >= state.until:
            self._finish(state, remaining=0)

    def _finish(self, state: _Range, remaining: int) -> None:
        """``state``'s range is done; ``remaining`` offsets of it are given up."""
        state.done = True
        self.remaining -= remaining
        self.active -= 1
        self.finished.append(state)

    # -- slow paths ----------------------------------------------------------------------------

    def _filter(self, state: _Range, msgs: list[Message]) -> tuple[list[Message], np.ndarray, bool]:
        """The slow path: keep ``state``'s partition's records in ``[next_offset, until)``;
        also say whether a record of the partition at or past ``until`` was among them."""
        nxt, until = state.next_offset, state.until
        ours = [
            (m, o)
            for m, o in zip(msgs, map(_msg_offset, msgs), strict=True)
            if m.partition() == state.partition and m.topic() == state.topic
        ]
        kept = [(m, o) for m, o in ours if nxt <= o < until]
        beyond = any(o >= until for _, o in ours)
        dropped = len(msgs) - len(kept)
        if dropped and (not kept or kept[-1][1] < until - 1):
            log.debug(
                "dropped %d records outside %s [%d, %d)",
                dropped,
                state.rng.topic_partition,
                nxt,
                until,
            )
        kept_offsets = np.fromiter((o for _, o in kept), np.int64, len(kept))
        return [m for m, _ in kept], kept_offsets, beyond

    def _split_events(self, msgs: list[Message]) -> tuple[list[Message], _Events]:
        """Separate records from error events.

        Returns the records and the events that matter: per range, the highest
        end-of-partition offset reported, and the ranges whose fetch offset the broker said is
        out of range (their records after that event are dropped: the partition is fetched
        again from a new offset).
        """
        good: list[Message] = []
        events = _Events()
        out_of_range = events.out_of_range
        for msg, err in zip(msgs, map(_msg_error, msgs), strict=True):
            if err is None:
                if not out_of_range or self._state_of(msg) not in out_of_range:
                    good.append(msg)
                continue
            code = err.code()
            state = self._state_of(msg)
            if code == KafkaError._PARTITION_EOF:
                if state is not None:
                    events.eof[state] = max(events.eof.get(state, 0), msg.offset() or 0)
                continue
            if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                if state is not None:
                    out_of_range.append(state)
                continue
            if code == auth.GROUP_DENIED:
                # librdkafka looks up the coordinator of this assign-only consumer's group.id,
                # which it never uses: the group needs no ACL, and this event is harmless.
                continue
            if code == auth.TOPIC_DENIED:
                topic = state.topic if state is not None else msg.topic() or self.ranges[0].topic
                raise auth.topic_denied(topic, self.config, err)
            what = str(state) if state is not None else self._what()
            if err.fatal() or not (err.retriable() or code in TRANSIENT_FETCH_CODES):
                raise SparkGroupsError(
                    f"reading {what} from {bootstrap_servers_of(self.config)} failed: "
                    f"{scrub(err.str(), self.config)} ({err.name()})"
                )
            log.debug("transient error reading %s: %s", what, err.name())
        return good, events

    def _apply_events(self, events: _Events, now: float) -> None:
        for state, eof in events.eof.items():
            if not state.done and eof > state.next_offset:
                # The offsets up to the end of the log hold no record a consumer receives.
                self._advance(state, eof, now)
        for state in events.out_of_range:
            if state.done:
                continue
            self._out_of_range(state)
            if state.reassign_at is not None:
                tp = KafkaTopicPartition(state.topic, state.partition)
                self.consumer.incremental_unassign([tp])
                tp.offset = state.reassign_at
                self.consumer.incremental_assign([tp])
                state.reassign_at = None
                state.last_progress = now

    def _check_stalls(self, now: float) -> None:
        """Give every range without progress for ``poll_timeout_s`` to :meth:`_stalled`."""
        timeout = self.poll_timeout_s
        for state in self.states:
            if not state.done and now - state.last_progress >= timeout:
                self._stalled(state)  # raises, or gives up on the rest of the range
                self._finish(state, remaining=state.until - state.next_offset)
        waiting = [s.last_progress for s in self.states if not s.done]
        self.next_stall_check = min(waiting) + timeout if waiting else now + timeout

    def _what(self) -> str:
        """The task's ranges, for messages: the range, or how many and the first few."""
        if len(self.states) == 1:
            return str(self.states[0])
        shown = ", ".join(str(s) for s in self.states[:3])
        more = f", ... ({len(self.states)} ranges)" if len(self.states) > 3 else ""
        return shown + more

    def _client_error(self) -> None:
        """Raise refused credentials at once (librdkafka retries them forever)."""
        if auth.is_authentication_failure(self.entry.last_error):
            raise auth.authentication_error(self.entry.last_error, self.config)

    def _watermarks(self, state: _Range) -> tuple[int, int]:
        tp = KafkaTopicPartition(state.topic, state.partition)
        try:
            timeout = min(_PROBE_TIMEOUT_S, max(1.0, self.poll_timeout_s))
            return self.consumer.get_watermark_offsets(tp, timeout=timeout)
        except KafkaException as exc:
            raise BrokerUnreachableError(
                f"cannot reach {bootstrap_servers_of(self.config)} to read {state}: "
                f"{scrub(error_text(exc), self.config)}",
                servers=bootstrap_servers_of(self.config),
            ) from None

    def _lost(self, state: _Range, lost_from: int, lost_until: int, why: str) -> None:
        rng = state.rng
        text = (
            f"records [{lost_from}, {lost_until}) of {rng.topic_partition} (planned range "
            f"[{rng.from_offset}, {rng.until_offset})) cannot be read: {why}"
        )
        if self.fail_on_data_loss:
            raise DataLossError(
                text + "; set failOnDataLoss=false to skip them",
                partition=rng.topic_partition,
                from_offset=lost_from,
                until_offset=lost_until,
            )
        log.warning("%s; skipping them (failOnDataLoss=false)", text)

    def _out_of_range(self, state: _Range) -> None:
        """The broker says ``state``'s fetch offset is out of range: lost records (raise, or
        skip them and carry on from the log start, setting ``reassign_at``)."""
        low, high = self._watermarks(state)
        nxt, until = state.next_offset, state.until
        if low > nxt:
            self._lost(state, nxt, min(low, until), f"deleted (the log now starts at {low})")
            if low >= until:
                self._finish(state, remaining=until - nxt)
            else:
                self.remaining -= low - nxt
                state.next_offset = low
                state.reassign_at = low
        else:
            self._lost(
                state, nxt, until, f"offset {nxt} is beyond the log (log start {low}, end {high})"
            )
            self._finish(state, remaining=until - nxt)

    def _stalled(self, state: _Range) -> None:
        low, _ = self._watermarks(state)  # raises BrokerUnreachableError when nothing answers
        last = self.entry.last_error
        if last is not None and last.code() in UNREACHABLE_CODES:
            # Metadata answered just now, but fetches kept failing on the transport.
            raise BrokerUnreachableError(
                f"no progress reading {state.rng.topic_partition} from "
                f"{bootstrap_servers_of(self.config)} for {self.poll_timeout_s:g} s "
                f"(last error {last.name()})",
                servers=bootstrap_servers_of(self.config),
                waited_s=self.poll_timeout_s,
            )
        tp = KafkaTopicPartition(state.topic, state.partition)
        _, fetched_high = self.consumer.get_watermark_offsets(tp, cached=True)
        self._lost(
            state,
            state.next_offset,
            state.until,
            f"no record arrived for {self.poll_timeout_s:g} s (log start {low}, "
            f"last fetched high watermark {fetched_high})",
        )


@dataclass
class _Events:
    """The events of one chunk that matter: end-of-partition offsets and out-of-range
    errors, by range."""

    eof: dict[_Range, int] = field(default_factory=dict)
    out_of_range: list[_Range] = field(default_factory=list)
