"""librdkafka configurations: layering defaults, the caller's settings and requirements.

Every client spark_groups creates is configured in three layers, later ones winning::

    defaults (ours)  <  the caller's settings (``kafka.*`` options)  <  requirements (ours)

Defaults make a client behave well out of the box; requirements are settings the client's
job depends on (an ``assign()``-only reader never auto-commits, for instance).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


def layered(
    defaults: Mapping[str, Any], given: Mapping[str, Any], required: Mapping[str, Any]
) -> dict[str, Any]:
    """``defaults`` < ``given`` < ``required``; a ``given`` value that a requirement overrides
    is logged at DEBUG (by key only: values may be secrets)."""
    config: dict[str, Any] = dict(defaults)
    config.update({str(k): v for k, v in given.items()})
    for key, value in required.items():
        previous = config.get(key)
        if previous is not None and str(previous).lower() != str(value).lower():
            log.debug("consumer option %s is ignored by this client (always %s)", key, value)
        config[key] = value
    return config


def bootstrap_servers_of(config: Mapping[str, Any]) -> str:
    """The bootstrap servers named in ``config`` (the only config value errors may show)."""
    return str(config.get("bootstrap.servers") or config.get("metadata.broker.list") or "?")


def split_servers(servers: str | list[str] | tuple[str, ...]) -> str:
    """Bootstrap servers given as ``"h1:9092,h2:9092"`` or as a list, as librdkafka's
    comma-separated string (blanks dropped)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    return ",".join(s.strip() for s in items if s and s.strip())
