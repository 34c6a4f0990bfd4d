"""ListOffsets for a set of partitions within a deadline, asked again while leadership moves.

Requests of at most :data:`REQUEST_PARTITIONS` partitions ask for the log end
(:data:`LATEST`), the log start (:data:`EARLIEST`) or the first offset at or after a
timestamp. Leadership that moved refreshes the metadata and asks again; a partition answered
"unknown" that fresh metadata knows (a restarted broker still loading its log) is asked again
too. No answer by the deadline raises :class:`~spark_groups.errors.BrokerUnreachableError`, an
unknown topic :class:`~spark_groups.errors.TopicNotFoundError`, a denied one the error of
:mod:`spark_groups.kafka.auth`. Secrets never reach a message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from spark_groups.errors import BrokerUnreachableError, SparkGroupsError, TopicNotFoundError
from spark_groups.kafka import auth
from spark_groups.kafka.classify import LEADERSHIP_MOVED_CODES, NO_ANSWER_CODES, UNKNOWN_TOPIC_CODES
from spark_groups.kafka.client import Consumer, KafkaError, KafkaException, KafkaTopicPartition
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.starting import LATEST
from spark_groups.secrets import scrub

log = logging.getLogger(__name__)

#: The most partitions one ListOffsets request asks for (:func:`_in_requests`).
REQUEST_PARTITIONS = 500
#: Pause between two ListOffsets tries after an answer that leadership moved.
_RETRY_BACKOFF_S = 0.1


def partition_names(tps: list[TopicPartition], most: int = 5) -> str:
    """``tps`` for a message: the first ``most`` of them, then how many more."""
    shown = ", ".join(str(tp) for tp in tps[:most])
    return shown + (f" and {len(tps) - most} more" if len(tps) > most else "")


def list_offsets(
    consumer: Consumer,
    tps: list[TopicPartition],
    which: int | Mapping[TopicPartition, int],
    deadline: float,
    *,
    config: Mapping[str, Any],
    timeout_s: float,
) -> dict[TopicPartition, int]:
    """ListOffsets for ``tps`` through ``consumer`` until ``deadline`` (``time.monotonic()``):
    ``which`` is :data:`LATEST`, :data:`EARLIEST` or a timestamp (ms) per partition. By time,
    -1 answers "no record that late"; otherwise it is an error. ``config`` is the consumer's
    (for the servers named in errors and the secrets kept out of them); ``timeout_s`` the
    wait that errors report."""
    servers = bootstrap_servers_of(config)
    by_time = isinstance(which, Mapping)
    request = [
        KafkaTopicPartition(
            tp.topic, tp.partition, which[tp] if isinstance(which, Mapping) else which
        )
        for tp in tps
    ]
    kind = "by time" if by_time else "end" if which == LATEST else "start"
    what = f"to list the {kind} offsets of {partition_names(tps)}"
    refreshed = False
    moved: KafkaError | None = None  # the last answer that leadership moved
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _unreachable(what, moved, config, timeout_s)
        try:
            answer = _in_requests(consumer, request, deadline)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            code = err.code() if err is not None else None
            if code in UNKNOWN_TOPIC_CODES and not refreshed:
                # The consumer's metadata may predate the topic: look again, once.
                refreshed = True
                _refresh_metadata(consumer, tps, deadline)
                continue
            if (
                code in UNKNOWN_TOPIC_CODES
                and err is not None
                and _in_metadata(consumer, tps, deadline)
            ):
                moved = err  # a broker that restarted and is still loading the log: wait
                _await_new_leaders(consumer, tps, err, deadline, servers)
                continue
            if code in UNKNOWN_TOPIC_CODES:
                raise TopicNotFoundError(
                    f"unknown topic or partition on {servers}: {partition_names(tps)}",
                    topics=sorted({tp.topic for tp in tps}),
                    servers=servers,
                ) from None
            if code in LEADERSHIP_MOVED_CODES and err is not None:
                moved = err
                _await_new_leaders(consumer, tps, err, deadline, servers)
                continue
            if code == auth.TOPIC_DENIED and err is not None:
                topics = ", ".join(sorted({tp.topic for tp in tps}))
                raise auth.topic_denied(topics, config, err) from None
            if code is None or code in NO_ANSWER_CODES:
                raise _unreachable(what, err, config, timeout_s) from None
            assert err is not None  # a code came from it
            raise SparkGroupsError(
                f"ListOffsets on {servers} failed {what}: {err.name()}: {scrub(err.str(), config)}"
            ) from None
        by_tp = {TopicPartition(got.topic, got.partition): got for got in answer}
        errors = [e for e in (by_tp[tp].error for tp in tps if tp in by_tp) if e is not None]
        moving = [e for e in errors if e.code() in LEADERSHIP_MOVED_CODES]
        unknown = [e for e in errors if e.code() in UNKNOWN_TOPIC_CODES]
        if not moving and unknown and _in_metadata(consumer, tps, deadline):
            moving = unknown  # the metadata knows them: a broker still loading the log
        if moving:
            moved = moving[0]
            _await_new_leaders(consumer, tps, moved, deadline, servers)
            continue
        result: dict[TopicPartition, int] = {}
        for tp in tps:
            got = by_tp.get(tp)
            if got is None:
                raise SparkGroupsError(f"ListOffsets on {servers} skipped {tp}")
            if got.error is not None:
                if got.error.code() == auth.TOPIC_DENIED:
                    raise auth.topic_denied(tp.topic, config, got.error)
                if got.error.code() in UNKNOWN_TOPIC_CODES:
                    raise TopicNotFoundError(
                        f"unknown topic or partition {tp} on {servers}",
                        topics=[tp.topic],
                        servers=servers,
                    )
                raise SparkGroupsError(
                    f"ListOffsets for {tp} on {servers} failed: {got.error.name()}"
                )
            if got.offset < 0 and not (by_time and got.offset == -1):
                raise SparkGroupsError(
                    f"ListOffsets for {tp} on {servers} answered no offset ({got.offset})"
                )
            result[tp] = got.offset
        return result


def _in_requests(
    consumer: Consumer, request: list[KafkaTopicPartition], deadline: float
) -> list[KafkaTopicPartition]:
    """librdkafka's answer to ``request``, asked :data:`REQUEST_PARTITIONS` at a time (a
    request's cost per partition grows with its size: docs/history.md, "Many partitions")."""
    answer: list[KafkaTopicPartition] = []
    for first in range(0, len(request), REQUEST_PARTITIONS):
        left = max(0.001, deadline - time.monotonic())
        part = request[first : first + REQUEST_PARTITIONS]
        answer += consumer.offsets_for_times(part, timeout=left)
    return answer


def _unreachable(
    what: str, err: KafkaError | None, config: Mapping[str, Any], timeout_s: float
) -> BrokerUnreachableError:
    servers = bootstrap_servers_of(config)
    detail = ""
    if err is not None:
        detail = f" (the last answer: {err.name()}: {scrub(err.str(), config)})"
    return BrokerUnreachableError(
        f"no answer from {servers} within {timeout_s:g} s {what}{detail}",
        servers=servers,
        waited_s=timeout_s,
    )


def _await_new_leaders(
    consumer: Consumer, tps: list[TopicPartition], err: KafkaError, deadline: float, servers: str
) -> None:
    """Leadership of ``tps`` moved (``err``): refresh metadata and pause briefly before
    the caller asks again; the caller's deadline bounds the retries."""
    log.info(
        "ListOffsets on %s: %s for %s; asking again with fresh metadata",
        servers,
        err.name(),
        partition_names(tps),
    )
    _refresh_metadata(consumer, tps, deadline)
    time.sleep(min(_RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0)))


def _in_metadata(consumer: Consumer, tps: list[TopicPartition], deadline: float) -> bool:
    """Whether fresh metadata knows every partition of ``tps`` (ListOffsets answered that it
    does not: right after a broker restarted, before it loaded the log, it does so for
    partitions that exist)."""
    for topic in sorted({tp.topic for tp in tps}):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            found = consumer.list_topics(topic, timeout=left).topics.get(topic)
        except KafkaException:
            return False
        if found is None or found.error is not None:
            return False
        wanted = {tp.partition for tp in tps if tp.topic == topic}
        if not wanted <= set(found.partitions):
            return False
    return True


def _refresh_metadata(consumer: Consumer, tps: list[TopicPartition], deadline: float) -> None:
    for topic in sorted({tp.topic for tp in tps}):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            consumer.list_topics(topic, timeout=left)
        except KafkaException:
            return
