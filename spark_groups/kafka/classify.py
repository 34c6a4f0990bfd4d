"""What a librdkafka error means for spark_groups: one classification for every client.

Error codes are grouped by what the caller should do about them; every module that looks at
a ``KafkaError`` asks here instead of keeping its own set.
"""

from __future__ import annotations

import re

from confluent_kafka import KafkaError, KafkaException

from spark_groups.errors import OptionError
from spark_groups.secrets import is_secret

#: No connection to any broker: the network, DNS, or every broker down.
UNREACHABLE_CODES = frozenset(
    {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}
)
#: A request that got no answer in time (local or broker-side timeout).
TIMEOUT_CODES = frozenset({KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})
#: The partition's leader is unknown or moved (an election, a broker restarting).
NO_LEADER_CODES = frozenset({KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION})
#: "Ask again after a metadata refresh": leadership moved or is moving (a broker that was
#: frozen or restarted comes back with a newer leader epoch; librdkafka replaces the handle
#: of a broker that vanished from metadata, failing its requests with _DESTROY_BROKER).
LEADERSHIP_MOVED_CODES = NO_LEADER_CODES | frozenset(
    {
        KafkaError._DESTROY_BROKER,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
    }
)
#: A request answered "no such topic or partition" (possibly stale metadata).
UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}
)
#: This member's generation or membership is no longer valid (its commits are refused).
FENCED_CODES = frozenset(
    {
        # The classic protocol's generation checks.
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError._ASSIGNMENT_LOST,
        # KIP-848's member epochs.
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError._FENCED,
    }
)
#: A list-offsets or metadata request with one of these codes: the broker did not answer.
NO_ANSWER_CODES = UNREACHABLE_CODES | TIMEOUT_CODES | NO_LEADER_CODES
#: Fetch errors a reader waits out (librdkafka retries them) instead of failing the range.
TRANSIENT_FETCH_CODES = (
    UNREACHABLE_CODES
    | {KafkaError._TIMED_OUT}
    | LEADERSHIP_MOVED_CODES
    | UNKNOWN_TOPIC_CODES
    | {KafkaError.KAFKA_STORAGE_ERROR}
)


def error_of(exc: KafkaException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries, if any."""
    err = exc.args[0] if exc.args else None
    return err if isinstance(err, KafkaError) else None


def code_of(exc: KafkaException) -> int | None:
    """The Kafka error code of ``exc``, or None when it carries none."""
    err = error_of(exc)
    return err.code() if err is not None else None


def error_text(exc: KafkaException) -> str:
    """librdkafka's own text of ``exc`` (not yet scrubbed)."""
    err = error_of(exc)
    return err.str() if err is not None else str(exc)


def config_error(exc: KafkaException) -> OptionError:
    """Turn librdkafka's config complaint into an OptionError naming the ``kafka.`` key."""
    text = str(exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else exc)
    match = re.search(r'property[: "]+([A-Za-z0-9._]+)', text) or re.search(
        r'"([A-Za-z0-9._]+)"', text
    )
    key = f"kafka.{match.group(1)}" if match else "kafka.*"
    if is_secret(key):
        text = "invalid value (not shown: secret)"
    return OptionError(key, f"rejected by the Kafka client: {text}")
