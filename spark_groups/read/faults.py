"""When a task's ranges cannot be read as planned: Kafka errors as typed errors, and data loss.

:class:`Faults` decides and reports; the read loop keeps the ranges' progress. A stalled or
out-of-range range loses records or fails, an unreachable broker is
:class:`~spark_groups.errors.BrokerUnreachableError` (the rules: :mod:`spark_groups.read.reader`,
"When it cannot end"); refused credentials, a denied topic and Kafka errors that retrying
cannot fix raise at once; transient fetch errors are waited out (librdkafka retries them).
Errors name the range's partition; nothing here logs or raises configuration values.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from spark_groups.errors import BrokerUnreachableError, DataLossError, SparkGroupsError
from spark_groups.kafka import auth
from spark_groups.kafka.classify import TRANSIENT_FETCH_CODES, UNREACHABLE_CODES, error_text
from spark_groups.kafka.client import KafkaError, KafkaException, KafkaTopicPartition
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.read.pool import PooledConsumer
from spark_groups.read.progress import RangeState, describe
from spark_groups.secrets import scrub

# The read path logs under the logger it has always used (spark_groups.read.reader).
log = logging.getLogger("spark_groups.read.reader")

#: Longest wait for the watermarks asked at a deadline or an out-of-range error (also bounded
#: by poll_timeout_s); no answer means the broker is unreachable.
_PROBE_TIMEOUT_S = 10.0


class Faults:
    """The fault handling of one task: its consumer, configuration, ranges (to name them),
    poll timeout and ``fail_on_data_loss``. It decides and reports; the read loop keeps the
    ranges' progress."""

    def __init__(
        self,
        entry: PooledConsumer,
        config: Mapping[str, str],
        states: Sequence[RangeState],
        poll_timeout_s: float,
        fail_on_data_loss: bool,
    ) -> None:
        self.entry = entry
        self.consumer = entry.consumer
        self.config = config
        self.states = states
        self.poll_timeout_s = poll_timeout_s
        self.fail_on_data_loss = fail_on_data_loss

    def client_error(self) -> None:
        """Raise refused credentials at once (librdkafka retries them forever)."""
        if auth.is_authentication_failure(self.entry.last_error):
            raise auth.authentication_error(self.entry.last_error, self.config)

    def fetch_error(self, err: KafkaError, state: RangeState | None, topic: str | None) -> None:
        """An error event ``err`` other than end-of-partition and out-of-range (``state``: its
        range, if any; ``topic``: the event's topic, if any): raise it, or let it pass when it
        is harmless or transient."""
        code = err.code()
        if code == auth.GROUP_DENIED:
            # librdkafka looks up the coordinator of this assign-only consumer's group.id,
            # which it never uses: the group needs no ACL, and this event is harmless.
            return
        if code == auth.TOPIC_DENIED:
            topic = state.topic if state is not None else topic or self.states[0].topic
            raise auth.topic_denied(topic, self.config, err)
        what = str(state) if state is not None else describe(self.states)
        if err.fatal() or not (err.retriable() or code in TRANSIENT_FETCH_CODES):
            raise SparkGroupsError(
                f"reading {what} from {bootstrap_servers_of(self.config)} failed: "
                f"{scrub(err.str(), self.config)} ({err.name()})"
            )
        log.debug("transient error reading %s: %s", what, err.name())

    def watermarks(self, state: RangeState) -> tuple[int, int]:
        """The low and high watermarks of ``state``'s partition, asked of the broker;
        :class:`BrokerUnreachableError` when it does not answer."""
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

    def lost(self, state: RangeState, lost_from: int, lost_until: int, why: str) -> None:
        """Records ``[lost_from, lost_until)`` of ``state``'s range cannot be read (``why``):
        :class:`DataLossError`, or a warning with ``fail_on_data_loss=False``."""
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

    def out_of_range(self, state: RangeState) -> int | None:
        """The broker says ``state``'s fetch offset is out of range: report the lost records
        (:meth:`lost`). Returns the offset to read on from (the new log start, inside the
        range), or None when nothing is left of the range."""
        low, high = self.watermarks(state)
        nxt, until = state.next_offset, state.until
        if low > nxt:
            self.lost(state, nxt, min(low, until), f"deleted (the log now starts at {low})")
            return low if low < until else None
        self.lost(
            state, nxt, until, f"offset {nxt} is beyond the log (log start {low}, end {high})"
        )
        return None

    def stalled(self, state: RangeState) -> None:
        """``state``'s range made no progress for ``poll_timeout_s``: raise
        :class:`BrokerUnreachableError` if the broker is unreachable, else report the rest of
        the range lost (:meth:`lost`)."""
        low, _ = self.watermarks(state)  # raises BrokerUnreachableError when nothing answers
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
        self.lost(
            state,
            state.next_offset,
            state.until,
            f"no record arrived for {self.poll_timeout_s:g} s (log start {low}, "
            f"last fetched high watermark {fetched_high})",
        )
