"""A worker's share consumers and its one Acknowledger per sink table.

A reading task takes an idle consumer (:func:`checkout`), polls it, and hands it with what it
acquired to the table's :func:`acknowledger`, which gives it back (:func:`checkin`) once its
records are settled: a consumer is never polled while records of its last poll wait
(explicit acknowledgement requires it). Consumers and acknowledgers outlive their task (Spark
reuses its Python workers); idle consumers wait in the read path's pool
(``spark_groups.read.pool``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_groups.kafka.config import layered
from spark_groups.kafka.share_client import create_share_consumer
from spark_groups.read import pool
from spark_groups.share.acks import Acknowledger, Acquired, CommitWatch, Outcome

log = logging.getLogger(__name__)

#: Settings the share reading depends on; they override the caller's configuration.
SHARE_REQUIRED: dict[str, str] = {"share.acknowledgement.mode": "explicit"}


@dataclass(eq=False)
class PooledShareConsumer:
    """One share consumer, its pool key (the process that made it first), and since when
    records may wait in its buffer (``exposed_since``, ``time.monotonic()``; None: its buffer
    was drained since its last exposure).

    An acknowledgement's commit, and a fetch a poll that returned nothing left open, can
    acquire the group's next records for the consumer, their lock running until it is polled
    again (docs/share-groups.md, "What the broker and the client do"), so the lock of what a
    pooled consumer's next poll returns is counted from the first such exposure."""

    key: pool.PoolKey
    consumer: Any
    exposed_since: float | None = None

    def exposed(self, at: float) -> None:
        """Records may be acquired for the buffer from ``at`` on (the earliest such moment
        since the buffer was drained is kept)."""
        if self.exposed_since is None or at < self.exposed_since:
            self.exposed_since = at


_ACKNOWLEDGERS: dict[tuple[int, str], Acknowledger] = {}
_LOCK = threading.Lock()


def share_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration a share consumer is made with (caller < required)."""
    return layered({}, config, SHARE_REQUIRED)


def checkout(config: Mapping[str, Any], topics: list[str]) -> PooledShareConsumer:
    """An idle share consumer of this process for ``config`` subscribed to ``topics``, or a
    new one."""
    full = share_config(config)
    key = pool.pool_key(f"share {','.join(sorted(topics))}", full)
    return pool.take(key) or PooledShareConsumer(key, create_share_consumer(full, topics))


def checkin(entry: PooledShareConsumer) -> None:
    """Keep ``entry`` for the next task (its records are settled), or close it when enough
    are idle."""
    if not pool.keep(entry):
        close_quietly(entry)


#: Close an entry (which releases what it holds), in its own process only.
close_quietly = pool.close_quietly


def acknowledger(path: str, storage_options: Mapping[str, str] | None = None) -> Acknowledger:
    """This process's acknowledger for the sink table at ``path``."""
    key = (os.getpid(), path)
    with _LOCK:
        found = _ACKNOWLEDGERS.get(key)
        if found is None:
            found = _ACKNOWLEDGERS[key] = Acknowledger(CommitWatch(path, storage_options), _back)
        return found


def _back(acquired: Acquired, outcome: Outcome, acked_at: float) -> None:
    """An acknowledger's ``on_done``: the settled consumer back into its pool."""
    acquired.owner.exposed(acked_at)
    checkin(acquired.owner)
