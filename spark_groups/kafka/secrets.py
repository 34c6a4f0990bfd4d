"""Keeping secrets (SASL passwords, SSL keys, tokens) out of logs, errors and tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SECRET_WORDS = ("password", "secret", "jaas", "token", "credential", "keystore")
_SECRET_PREFIXES = ("ssl.key.", "sasl.")
_NOT_SECRET = ("sasl.mechanism", "sasl.mechanisms")


def is_secret(key: str) -> bool:
    """True when a config key may hold a secret (its value must never be logged or shown):
    passwords, keys, tokens, and every ``sasl.*`` setting but the mechanism."""
    k = key.lower().removeprefix("kafka.")
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
