"""Log ends confirmed by a fetch, for brokers whose ListOffsets under-reports them (Tansu).

The high watermark in a fetch response is the log end: :func:`fetch_high_watermarks`
fetches each partition at ``listed - 1`` and reads it. :class:`ConfirmedEnds` remembers what
a fetch confirmed: while a partition's listed end is unchanged it has no new record batch, so
the confirmed end still holds, as long as the log is the same log
(:meth:`ConfirmedEnds.forget` the partitions whose log may have been replaced).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from spark_groups.errors import SparkGroupsError
from spark_groups.kafka import auth
from spark_groups.kafka.classify import NO_ANSWER_CODES, UNKNOWN_TOPIC_CODES
from spark_groups.kafka.client import Consumer, KafkaError, KafkaTopicPartition
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.kafka.list_offsets import partition_names
from spark_groups.offsets import TopicPartition
from spark_groups.secrets import scrub

log = logging.getLogger(__name__)


class ConfirmedEnds:
    """The log end a fetch confirmed per partition, with the listed end it was confirmed at."""

    def __init__(self) -> None:
        # partition -> (listed end at the last confirming fetch, end that fetch confirmed)
        self._ends: dict[TopicPartition, tuple[int, int]] = {}

    def split(
        self, listed: Mapping[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """``listed`` (ListOffsets' ends) split in two: the ends still confirmed (the listed
        end unchanged since the confirming fetch), and the listed ends still to confirm."""
        ends: dict[TopicPartition, int] = {}
        to_fetch: dict[TopicPartition, int] = {}
        for tp, end in listed.items():
            known = self._ends.get(tp)
            if known is not None and known[0] == end:
                ends[tp] = max(end, known[1])
            else:
                to_fetch[tp] = end
        return ends, to_fetch

    def confirm(
        self, to_fetch: Mapping[TopicPartition, int], fetched: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """The ends of ``to_fetch`` (listed ends) given the high watermarks ``fetched``:
        ``max(listed, fetched)``, remembered; the listed end, not remembered, where no fetch
        answered in time (it never exceeds the log end, so it is safe, only possibly short)."""
        ends: dict[TopicPartition, int] = {}
        for tp, end in to_fetch.items():
            high = fetched.get(tp)
            if high is None:
                ends[tp] = end
                continue
            ends[tp] = max(end, high)
            self._ends[tp] = (end, ends[tp])
            if ends[tp] != end:
                log.debug("%s: ListOffsets said %d, a fetch says %d", tp, end, ends[tp])
        return ends

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop what is remembered of ``partitions``: they are confirmed afresh."""
        for tp in partitions:
            self._ends.pop(tp, None)


def fetch_high_watermarks(
    consumer: Consumer,
    listed: dict[TopicPartition, int],
    deadline: float,
    *,
    config: Mapping[str, Any],
    timeout_s: float,
) -> dict[TopicPartition, int]:
    """Fetch every partition at ``listed - 1`` and read the high watermark its fetch
    response carried (each partition answers with a record or an end-of-partition event).

    Partitions without an answer by ``deadline`` are left out, with a warning (naming
    ``timeout_s``): the listed end never exceeds the log end, so planning up to it is safe,
    only possibly short. ``consumer`` is assigned for the call and unassigned after; it must
    report end-of-partition events (``enable.partition.eof``).
    """
    servers = bootstrap_servers_of(config)
    consumer.assign(
        [KafkaTopicPartition(tp.topic, tp.partition, max(end - 1, 0)) for tp, end in listed.items()]
    )
    try:
        waiting = set(listed)
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning(
                    "no fetch answer from %s within %g s for %s; using ListOffsets for them",
                    servers,
                    timeout_s,
                    partition_names(sorted(waiting)),
                )
                break
            # poll() returns at the first event; consume(n, t) would wait for n of them.
            first = consumer.poll(min(left, 0.2))
            if first is None:
                continue
            for msg in [first, *consumer.consume(1000, 0)]:
                err = msg.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    waiting.discard(TopicPartition(msg.topic(), msg.partition()))  # type: ignore[arg-type]
                elif err.code() == auth.GROUP_DENIED:
                    continue  # the coordinator of a group this consumer never joins
                elif err.code() == auth.TOPIC_DENIED:
                    raise auth.topic_denied(msg.topic() or "?", config, err)
                elif err.fatal() or not (
                    err.retriable()
                    or err.code() in NO_ANSWER_CODES
                    or err.code() in UNKNOWN_TOPIC_CODES
                ):
                    raise SparkGroupsError(
                        f"fetching from {servers} failed: {err.name()}: {scrub(err.str(), config)}"
                    )
        result: dict[TopicPartition, int] = {}
        for tp in listed:
            if tp in waiting:
                continue
            _, high = consumer.get_watermark_offsets(
                KafkaTopicPartition(tp.topic, tp.partition), cached=True
            )
            if high >= 0:
                result[tp] = high
        return result
    finally:
        consumer.unassign()
