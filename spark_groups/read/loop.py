"""The read loop of one task: its ranges read on one consumer, records routed to their range.

Every partition is assigned at its range's start; each chunk of records ``consume()`` hands
over is routed to its range by topic and partition, kept within ``[from, until)`` and added to
the batch's columns; a partition stops being fetched (``incremental_unassign``) once its range
is complete. When a range is complete is :mod:`spark_groups.read.reader`'s module doc ("How a
range ends").

This is the hot path: no Python work per record beyond what the columns need. Error events are
split off by :mod:`~spark_groups.read.events`; records that cannot be read are
:mod:`~spark_groups.read.faults`' to decide on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from spark_groups.kafka.client import KafkaTopicPartition, Message
from spark_groups.offsets import OffsetRange
from spark_groups.read.columns import Columns, Constants, consume_chunk
from spark_groups.read.events import Events, split_events
from spark_groups.read.faults import Faults
from spark_groups.read.pool import PooledConsumer
from spark_groups.read.progress import RangeState, describe
from spark_groups.read.schema import arrow_schema

# The read path logs under the logger it has always used (spark_groups.read.reader).
log = logging.getLogger("spark_groups.read.reader")

#: Longest single wait inside ``consume()``; the overall wait is ``poll_timeout_s``.
_CONSUME_WAIT_S = 0.25
#: A task stops fetching the partitions of its finished ranges (``incremental_unassign``)
#: when this many are finished, or the first of them finished this long ago.
_UNASSIGN_BATCH = 64
_UNASSIGN_WAIT_S = 0.05

_msg_error = Message.error
_msg_offset = Message.offset
_msg_partition = Message.partition
_msg_topic = Message.topic


class TaskRead:
    """The state of one :func:`~spark_groups.read.reader.read_ranges` call: its ranges, read
    on one consumer (``entry``'s); :meth:`run` yields the record batches."""

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
        self.ranges = tuple(ranges)
        self.include_headers = include_headers
        self.max_batch_rows = max_batch_rows
        self.poll_timeout_s = poll_timeout_s
        self.schema = arrow_schema(include_headers)
        self.states = [RangeState(r, i) for i, r in enumerate(self.ranges)]
        self.faults = Faults(entry, config, self.states, poll_timeout_s, fail_on_data_loss)
        self.multi_topic = len({r.topic for r in self.ranges}) > 1
        # Records are routed by partition, or by (topic, partition) when topics differ.
        self.by_key: dict[Any, RangeState] = {
            self._key(s.topic, s.partition): s for s in self.states
        }
        self.active = len(self.states)
        #: Offsets still to read over the unfinished ranges (bounds each consume() call).
        self.remaining = sum(s.until - s.next_offset for s in self.states)
        self.finished: list[RangeState] = []  # done since the last incremental_unassign
        self.finished_since: float | None = None
        #: Records past a range's end arrived: stop fetching finished partitions now.
        self.past_end = False
        self.next_stall_check = 0.0

    def _key(self, topic: str | None, partition: int | None) -> Any:
        return (topic, partition) if self.multi_topic else partition

    def _state_of(self, msg: Message) -> RangeState | None:
        state = self.by_key.get(self._key(msg.topic(), msg.partition()))
        if state is not None and state.topic != msg.topic():
            return None
        return state

    # -- main loop ---------------------------------------------------------------------------

    def run(self) -> Iterator[pa.RecordBatch]:
        """Read every range to its end; yield record batches of at most ``max_batch_rows``."""
        states = self.states
        single = states[0] if len(states) == 1 else None
        consumer = self.consumer
        consume = consumer.consume
        entry = self.entry
        max_rows = self.max_batch_rows
        chunk = consume_chunk()
        log.debug("reading %s", describe(self.states))
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
                self.faults.client_error()
            now = time.monotonic()
            events: Events | None = None
            if msgs and any(map(_msg_error, msgs)):
                msgs, events = split_events(msgs, self._state_of, self.faults)
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
        log.debug("read %d records of %s", rows, describe(self.states))

    def _stop_fetching(self, now: float) -> None:
        """Unassign the partitions of finished ranges, a few at a time (each call costs as
        much as reading many records), but at once when records past a range's end arrive:
        until then they are fetched and dropped."""
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
        self, state: RangeState, msgs: list[Message], pending: Columns, now: float, trusted: bool
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

    def _advance(self, state: RangeState, offset: int, now: float) -> None:
        """``state`` has read everything before ``offset``."""
        self.remaining -= min(offset, state.until) - state.next_offset
        state.next_offset = offset
        state.last_progress = now
        if offset >= state.until:
            self._finish(state, remaining=0)

    def _finish(self, state: RangeState, remaining: int) -> None:
        """``state``'s range is done; ``remaining`` offsets of it are given up."""
        state.done = True
        self.remaining -= remaining
        self.active -= 1
        self.finished.append(state)

    # -- slow paths ----------------------------------------------------------------------------

    def _filter(
        self, state: RangeState, msgs: list[Message]
    ) -> tuple[list[Message], np.ndarray, bool]:
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

    def _apply_events(self, events: Events, now: float) -> None:
        """Move ranges on by a chunk's end-of-partition and out-of-range events."""
        for state, eof in events.eof.items():
            if not state.done and eof > state.next_offset:
                # The offsets up to the end of the log hold no record a consumer receives.
                self._advance(state, eof, now)
        for state in events.out_of_range:
            if state.done:
                continue
            low = self._out_of_range(state)
            if low is not None:
                tp = KafkaTopicPartition(state.topic, state.partition)
                self.consumer.incremental_unassign([tp])
                tp.offset = low
                self.consumer.incremental_assign([tp])
                state.last_progress = now

    def _check_stalls(self, now: float) -> None:
        """Give every range without progress for ``poll_timeout_s`` to
        :meth:`Faults.stalled <spark_groups.read.faults.Faults.stalled>`."""
        timeout = self.poll_timeout_s
        for state in self.states:
            if not state.done and now - state.last_progress >= timeout:
                self.faults.stalled(state)  # raises, or gives up on the rest of the range
                self._finish(state, remaining=state.until - state.next_offset)
        waiting = [s.last_progress for s in self.states if not s.done]
        self.next_stall_check = min(waiting) + timeout if waiting else now + timeout

    def _out_of_range(self, state: RangeState) -> int | None:
        """The broker says ``state``'s fetch offset is out of range: lost records (raise, or
        skip them). Returns the log start to read on from, or None: the range is done."""
        low = self.faults.out_of_range(state)
        if low is None:
            self._finish(state, remaining=state.until - state.next_offset)
        else:
            self.remaining -= low - state.next_offset
            state.next_offset = low
        return low
