"""Keeping secrets (passwords, keys, tokens) out of logs, errors and tables.

Kafka client settings (``kafka.*``) and storage options (``storage.*``, delta-rs' names such
as ``aws_secret_access_key``, ``azure_storage_account_key``, ``google_service_account_key``)
are judged by the same rule (:func:`is_secret`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SECRET_WORDS = (
    "password",
    "secret",
    "jaas",
    "token",
    "credential",
    "keystore",
    # object stores: AWS access keys, Azure account / SAS keys, GCS service-account keys
    "access_key",
    "account_key",
    "sas_key",
    "service_account",
    "signature",
    # schema registries: basic.auth.user.info (user:password)
    "user.info",
)
_SECRET_PREFIXES = ("ssl.key.", "sasl.")
_NOT_SECRET = ("sasl.mechanism", "sasl.mechanisms")


def is_secret(key: str) -> bool:
    """True when a config key may hold a secret (its value must never be logged or shown):
    passwords, keys, tokens, every ``sasl.*`` setting but the mechanism, and object-store
    credentials (``storage.aws_secret_access_key``, ``storage.azure_storage_account_key``)."""
    k = key.lower().removeprefix("kafka.").removeprefix("storage.")
    if k in _NOT_SECRET:
        return False
    return any(word in k for word in _SECRET_WORDS) or k.startswith(_SECRET_PREFIXES)


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with the values of secret keys replaced by ``'***'``."""
    return {k: ("***" if is_secret(str(k)) else v) for k, v in config.items()}


def scrub(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with the value of every secret key of ``config`` replaced by ``***``
    (for client error messages that may echo a setting back)."""
    for key, value in config.items():
        if is_secret(str(key)) and isinstance(value, str | bytes) and value:
            secret = value.decode(errors="replace") if isinstance(value, bytes) else value
            text = text.replace(secret, "***")
    return text
