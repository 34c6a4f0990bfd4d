"""The read path's Kafka consumers: their configuration, and a pool of them per process.

Spark's executor Python workers are reused between tasks, so consumers are kept per worker
process and configuration: confluent-kafka's for the Python path,
:class:`~spark_groups.read.native.NativeConsumer` for the native one, and the ``kafka-share``
source's share consumers (``spark_groups.share.consumers``) by their subscription. They only
assign partitions at explicit offsets: never join a group, commit or store offsets. A consumer
inherited through ``fork()`` is never used, closed or freed (:func:`abandon`). librdkafka and
fork: docs/architecture.md, "The executor read path".
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from spark_groups.kafka.client import KafkaError, KafkaException, create_consumer
from spark_groups.kafka.config import bootstrap_servers_of, layered
from spark_groups.kafka.logs import LibrdkafkaLog

# The read path logs under the logger it has always used (spark_groups.read.reader).
log = logging.getLogger("spark_groups.read.reader")

#: Defaults merged *under* the caller's consumer configuration (the caller's value wins).
READER_DEFAULTS: dict[str, str] = {
    # librdkafka wants a group.id even for assign()-only consumers; it never joins this group.
    "group.id": "spark-groups-reader",
    # Tansu ignores max.partition.fetch.bytes, so a fetch can overfill the local queue, after
    # which librdkafka waits fetch.queue.backoff.ms (default 1 s) before fetching again.
    "fetch.queue.backoff.ms": "10",
    # How long an empty fetch waits at the log end. Ranges lie below the log end, so this only
    # matters (a) for the end-of-partition event of a range that ends in offsets without records
    # and (b) for the next range on a reused consumer: its first fetch waits for the empty
    # prefetch still in flight from the previous range.
    "fetch.wait.max.ms": "10",
    # Brokers close idle connections; that is not worth a log line per consumer.
    "log.connection.close": "false",
}

#: Settings the read path depends on; they override the caller's configuration.
READER_REQUIRED: dict[str, str] = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "error",
}

#: Idle consumers kept per configuration and process.
MAX_IDLE = 4


def reader_config(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration a read-path consumer is created with (defaults < caller < required)."""
    return layered(READER_DEFAULTS, consumer_config, READER_REQUIRED)


#: A pooled consumer's key: the process that created it, what it is (its read path, or a
#: share consumer and its topics), its configuration.
PoolKey = tuple[int, str, tuple[tuple[str, str], ...]]


def pool_key(kind: str, config: Mapping[str, Any]) -> PoolKey:
    """The key of this process's consumers of ``kind`` made with ``config``."""
    return (os.getpid(), kind, tuple(sorted((k, str(v)) for k, v in config.items())))


@dataclass(eq=False)
class PooledConsumer:
    """One cached consumer, its pool key, and the last client-wide error librdkafka reported.

    ``consumer`` is a confluent-kafka ``Consumer`` (the Python read path) or a
    :class:`~spark_groups.read.native.NativeConsumer` (the native one), by ``key``'s path."""

    key: PoolKey
    consumer: Any = None
    last_error: KafkaError | None = field(default=None)
    #: Where the native consumer's librdkafka lines go (the Python one's has its own).
    log: LibrdkafkaLog = field(default_factory=LibrdkafkaLog)

    @property
    def pid(self) -> int:
        """The process that created the consumer (the only one that may use it)."""
        return self.key[0]

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb``: served from inside ``consume()``, on the thread using the
        consumer."""
        self.last_error = err
        log.debug("kafka client error: %s", err.name())


#: Idle entries (a :class:`PooledConsumer`, or any object with a ``key`` and a ``consumer``).
_POOL: dict[PoolKey, list[Any]] = {}
_POOL_LOCK = threading.Lock()
# Consumers inherited through fork(). Their librdkafka threads do not exist in this process:
# closing or freeing one deadlocks, so they are kept (and given an extra reference, so not even
# interpreter shutdown frees them) and never touched again.
_ABANDONED: list[Any] = []


def abandon(entries: list[Any]) -> None:
    """Keep ``entries`` (objects with a ``consumer``) inherited through ``fork()`` alive and
    untouched for the life of the process: closing or freeing their consumers deadlocks."""
    for entry in entries:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(entry.consumer))
        _ABANDONED.append(entry)


def _after_fork_in_child() -> None:
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()  # the parent's lock may have been held at fork time
    inherited = [entry for entries in _POOL.values() for entry in entries]
    _POOL.clear()
    abandon(inherited)


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def take(key: PoolKey) -> Any | None:
    """An idle entry of this process under ``key`` (None: none is idle)."""
    with _POOL_LOCK:
        foreign = [k for k in _POOL if k[0] != key[0]]
        for k in foreign:  # fork without register_at_fork handlers: same treatment
            abandon(_POOL.pop(k))
        idle = _POOL.get(key)
        return idle.pop() if idle else None


def keep(entry: Any) -> bool:
    """Keep ``entry`` idle under its ``key`` for the next task; False when it is another
    process's or :data:`MAX_IDLE` are idle already (the caller closes it)."""
    if entry.key[0] != os.getpid():  # pragma: no cover - resumed after a fork
        return False
    with _POOL_LOCK:
        idle = _POOL.setdefault(entry.key, [])
        if len(idle) < MAX_IDLE:
            idle.append(entry)
            return True
    return False


def checkout(config: dict[str, str], path: str = "python") -> PooledConsumer:
    """An idle consumer of this process for ``config`` (a :func:`reader_config`), or a new one:
    a confluent-kafka one for ``path`` ``"python"``, a native one for ``"native"``."""
    key = pool_key(path, config)
    if (found := take(key)) is not None:
        return cast(PooledConsumer, found)
    entry = PooledConsumer(key=key, log=LibrdkafkaLog(config))
    if path == "native":
        from spark_groups.read import native

        entry.consumer = native.NativeConsumer(config)  # its errors: entry.on_error, by its loop
    else:
        entry.consumer = create_consumer({**config, "error_cb": entry.on_error})
    log.debug("created a read-path consumer for %s", bootstrap_servers_of(config))
    return entry


def checkin(entry: PooledConsumer) -> None:
    """Unassign ``entry`` and keep it for the next range (or close it if too many are idle)."""
    if entry.pid != os.getpid():  # pragma: no cover - a generator resumed after fork
        return
    try:
        entry.consumer.unassign()
    except (KafkaException, RuntimeError):
        close_quietly(entry)
        return
    entry.last_error = None
    if not keep(entry):
        close_quietly(entry)


def close_quietly(entry: Any) -> None:
    """Close ``entry``'s consumer (in the process that created it only; closing a share
    consumer releases what it holds), logging a failure."""
    if entry.key[0] != os.getpid():  # pragma: no cover - never close another process's consumer
        return
    try:
        entry.consumer.close()
    except Exception as exc:
        log.debug("closing a pooled consumer failed: %s", exc)


def close_cached_consumers() -> int:
    """Close every idle pooled consumer of this process; return how many were closed."""
    pid = os.getpid()
    with _POOL_LOCK:
        mine = [k for k in _POOL if k[0] == pid]
        entries = [e for k in mine for e in _POOL.pop(k)]
    for entry in entries:
        close_quietly(entry)
    return len(entries)
