"""The group's offsets in Kafka: commit them and read them back, Kafka's answers as typed errors.

Both run their consumer call on the member's owner thread through ``call``
(:meth:`GroupMember.call <spark_groups.group.member.GroupMember.call>`), from any thread.
What a failure becomes:

* refused credentials or a denied topic or group: :class:`AuthenticationError` /
  :class:`AuthorizationError` (retrying cannot help: the query must stop, not go on);
* a commit refused because this member was fenced or a rebalance moved on
  (:data:`~spark_groups.kafka.classify.FENCED_CODES`): :class:`StaleGenerationError`, with the
  generation the commit went out under;
* any other failed commit: :class:`CommitError`; a failed fetch: :class:`GroupMembershipError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TypeVar

from spark_groups.errors import CommitError, GroupMembershipError, StaleGenerationError
from spark_groups.kafka import auth
from spark_groups.kafka.classify import FENCED_CODES, code_of, error_of
from spark_groups.kafka.client import Consumer, KafkaException, KafkaTopicPartition
from spark_groups.offsets import TopicPartition

T = TypeVar("T")

#: The most bytes of offset records one OffsetCommit request carries (:func:`in_requests`):
#: half of ``__consumer_offsets``' default ``max.message.bytes``.
REQUEST_BYTES = 512 * 1024
#: What an offset record takes beyond its topic and metadata (key, value, batch framing).
RECORD_FRAMING_BYTES = 64
#: The most partitions one OffsetCommit request carries (:func:`in_requests`).
REQUEST_PARTITIONS = 500


class OnOwnerThread(Protocol):
    """Runs ``fn(consumer)`` on the member's owner thread: :meth:`GroupMember.call`."""

    def __call__(self, fn: Callable[[Consumer], T], timeout_s: float = ...) -> T:
        """``fn``'s result, or its exception, within ``timeout_s``."""
        ...


def to_kafka(
    partitions: Iterable[TopicPartition],
    offsets: Mapping[TopicPartition, int] | None = None,
    metadata: str | None = None,
) -> list[KafkaTopicPartition]:
    """``partitions`` as librdkafka's, with their ``offsets`` and commit ``metadata``."""
    if offsets is None:
        return [KafkaTopicPartition(p.topic, p.partition) for p in partitions]
    if metadata is None:
        return [KafkaTopicPartition(p.topic, p.partition, offsets[p]) for p in partitions]
    return [
        KafkaTopicPartition(p.topic, p.partition, offsets[p], metadata=metadata) for p in partitions
    ]


def in_requests(
    partitions: list[TopicPartition],
    metadata: str,
    budget: int = REQUEST_BYTES,
    most: int = REQUEST_PARTITIONS,
) -> list[list[TopicPartition]]:
    """``partitions`` cut into the OffsetCommit requests that carry them: each at most
    ``budget`` bytes of offset records (topic, metadata and ~64 bytes of framing each) and
    at most ``most`` partitions.

    The broker writes one request's offsets to ``__consumer_offsets`` as one record batch,
    and refuses a batch over that topic's ``max.message.bytes`` (1 MB by default) with an
    error librdkafka reports as "Unknown broker error": 2,500 partitions with 400 bytes of
    metadata failed so, and a metadata string names the sink's table path, up to
    1,024 characters. Offsets are committed per partition in any case; one request was never
    needed for correctness. A request's cost per partition also grows with its size: 5,000
    partitions took 97 ms in one request, 56 ms in ten (docs/benchmarks.md, "Many
    partitions")."""
    requests: list[list[TopicPartition]] = []
    size = budget
    fixed = len(metadata.encode()) + RECORD_FRAMING_BYTES
    for tp in partitions:
        record = len(tp.topic) + fixed
        if size + record > budget or len(requests[-1]) >= most:
            requests.append([])
            size = 0
        requests[-1].append(tp)
        size += record
    return requests


def committed_with_metadata(
    call: OnOwnerThread,
    partitions: Iterable[TopicPartition],
    timeout_s: float,
    *,
    config: Mapping[str, str],
) -> dict[TopicPartition, tuple[int, str]]:
    """The group's committed offsets with each commit's metadata string ("" for none);
    partitions with none are left out. ``config`` is the member's (names who was denied)."""
    wanted = to_kafka(partitions)
    if not wanted:
        return {}

    def fetch(consumer: Consumer) -> list[KafkaTopicPartition]:
        return consumer.committed(wanted, timeout=timeout_s)

    try:
        result = call(fetch, timeout_s + 5)
    except KafkaException as exc:
        denied = auth.classify(error_of(exc), config, wanted[0].topic)
        if denied is not None:
            raise denied from None
        raise GroupMembershipError(
            f"could not fetch committed offsets: {exc}", group=str(config.get("group.id", ""))
        ) from exc
    for p in result:
        denied = auth.classify(p.error, config, p.topic)
        if denied is not None:
            raise denied
    return {
        TopicPartition(p.topic, p.partition): (p.offset, p.metadata or "")
        for p in result
        if p.error is None and p.offset >= 0
    }


def commit(
    call: OnOwnerThread,
    offsets: Mapping[TopicPartition, int],
    timeout_s: float,
    *,
    config: Mapping[str, str],
    generation: Callable[[], int],
    owned: Callable[[Consumer], frozenset[TopicPartition]] | None = None,
    metadata: str | None = None,
) -> frozenset[TopicPartition]:
    """Commit ``offsets`` (next offset to read) with ``metadata`` under the member's current
    ``generation()``; return the partitions committed.

    With ``owned`` (run on the owner thread: the partitions the member owns), only those are
    committed, in the same call to the owner thread.
    """
    if not offsets:
        return frozenset()
    done: set[TopicPartition] = set()
    sent_under: list[int] = []  # the generation the commit went out under

    # Named ``commit``: tests tell this request from others by its name.
    def commit(consumer: Consumer) -> list[KafkaTopicPartition] | None:
        kept = dict(offsets)
        if owned is not None:
            still_owned = owned(consumer)
            kept = {tp: o for tp, o in kept.items() if tp in still_owned}
        done.update(kept)
        if not kept:
            return []
        sent_under.append(generation())
        answers: list[KafkaTopicPartition] = []
        for part in in_requests(sorted(kept), metadata or ""):
            answers += consumer.commit(offsets=to_kafka(part, kept, metadata), asynchronous=False)
        return answers

    try:
        result = call(commit, timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        code = code_of(exc)
        topics = ", ".join(sorted({tp.topic for tp in offsets}))
        denied = auth.classify(error_of(exc), config, topics)
        if denied is not None:  # retrying cannot help: the query must stop, not go on
            raise denied from None
        if code in FENCED_CODES:
            under = sent_under[0] if sent_under else generation()
            raise StaleGenerationError(
                f"Kafka refused the offset commit of {len(offsets)} partitions for generation "
                f"{under}: {error}",
                generation=under,
                partitions=offsets,
                code=code,
            ) from exc
        raise CommitError(
            f"the offset commit of {len(offsets)} partition(s) of {topics} failed: {exc}",
            partitions=offsets,
            code=code,
        ) from exc
    failed = [p for p in (result or []) if p.error is not None]
    if failed:
        first = failed[0]
        denied = auth.classify(first.error, config, first.topic)
        if denied is not None:
            raise denied
        if first.error.code() in FENCED_CODES:  # type: ignore[union-attr]
            under = sent_under[0] if sent_under else generation()
            raise StaleGenerationError(
                f"Kafka refused the offset commit of {first.topic}-{first.partition} for "
                f"generation {under}: {first.error}",
                generation=under,
                partitions=[TopicPartition(p.topic, p.partition) for p in failed],
                code=first.error.code(),  # type: ignore[union-attr]
            )
        raise CommitError(
            f"offset commit failed for {first.topic}-{first.partition}: {first.error}",
            partitions=[TopicPartition(p.topic, p.partition) for p in failed],
            code=first.error.code(),  # type: ignore[union-attr]
        )
    return frozenset(done)
