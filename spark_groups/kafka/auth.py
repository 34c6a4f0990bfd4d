"""librdkafka's authentication and authorization failures as typed errors.

:func:`classify` makes refused credentials an :class:`~spark_groups.errors.AuthenticationError`
and a denied topic or group an :class:`~spark_groups.errors.AuthorizationError` naming the
principal and the ACL to add. ``_AUTHENTICATION`` arrives only through the client's
``error_cb`` (inside ``poll``/``consume``; metadata calls meanwhile just time out). librdkafka
looks up the coordinator of every consumer's ``group.id``, also of the assign-only readers
that never use it, so their ``GROUP_DENIED`` is harmless. Where each failure shows up and what
the query does: docs/reliability.md, "Credentials and ACLs".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from spark_groups.errors import AuthenticationError, AuthorizationError
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.secrets import scrub

#: Codes that mean the brokers refused the client's credentials.
AUTHENTICATION_CODES = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
)
TOPIC_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = KafkaError.GROUP_AUTHORIZATION_FAILED


def _detail(err: KafkaError | str, config: Mapping[str, Any]) -> str:
    """librdkafka's text with every secret setting's value scrubbed (the user name is shown
    on purpose, so it is not scrubbed: a short name would garble the text)."""
    text = err.str() if isinstance(err, KafkaError) else str(err)
    return scrub(text, {k: v for k, v in config.items() if k != "sasl.username"})


def principal_of(config: Mapping[str, Any]) -> str | None:
    """The principal Kafka sees for a SASL PLAIN/SCRAM client (``User:<sasl.username>``)."""
    username = config.get("sasl.username")
    return f"User:{username}" if username else None


def is_authentication_failure(err: KafkaError | None) -> bool:
    """True when ``err`` says the brokers refused the client's credentials."""
    return err is not None and err.code() in AUTHENTICATION_CODES


def authentication_error(err: KafkaError | str, config: Mapping[str, Any]) -> AuthenticationError:
    """The :class:`AuthenticationError` of a client created with ``config``."""
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI"
    return AuthenticationError(
        servers=bootstrap_servers_of(config),
        username=str(config.get("sasl.username") or "(none)"),
        mechanism=str(mechanism),
        detail=_detail(err, config),
    )


def topic_denied(
    topic: str, config: Mapping[str, Any], err: KafkaError | str, operation: str = "READ"
) -> AuthorizationError:
    """``topic`` may not be read (or not even described) by this client."""
    return AuthorizationError(
        "topic",
        topic,
        operation,
        principal_of(config),
        bootstrap_servers_of(config),
        _detail(err, config),
    )


def group_denied(
    group: str, config: Mapping[str, Any], err: KafkaError | str
) -> AuthorizationError:
    """Consumer group ``group`` may not be used by this client."""
    return AuthorizationError(
        "group",
        group,
        "READ",
        principal_of(config),
        bootstrap_servers_of(config),
        _detail(err, config),
    )


def classify(
    err: KafkaError | None, config: Mapping[str, Any], topic: str | None = None
) -> AuthenticationError | AuthorizationError | None:
    """The typed error for ``err`` if it is an authentication or authorization failure
    (a topic denial names ``topic``, a group denial the config's ``group.id``), else None."""
    if err is None:
        return None
    code = err.code()
    if code in AUTHENTICATION_CODES:
        return authentication_error(err, config)
    if code == TOPIC_DENIED:
        return topic_denied(topic or "?", config, err)
    if code == GROUP_DENIED:
        return group_denied(str(config.get("group.id") or "?"), config, err)
    return None
