"""End offsets a planner can trust, on Kafka and on brokers that under-report them.

A batch reads each partition up to its log end: the high watermark, or the last stable offset
under ``isolation.level=read_committed``. :class:`EndOffsetResolver` finds it by mode
(:data:`END_OFFSET_MODES`, the ``endOffsets`` option): ``listOffsets`` trusts ListOffsets
(:mod:`~spark_groups.kafka.list_offsets`); ``fetch`` also confirms the end with a fetch at
``listed - 1`` and takes ``max(listed, fetched)``, reusing a confirmation while the listed end
is unchanged (:mod:`~spark_groups.kafka.confirmed_ends`); ``auto`` is ``fetch`` on a cluster
whose id names a broker known to under-report (Tansu), decided once from the metadata, else
``listOffsets``. The resolver owns one consumer that never joins a group or commits; it is
single-threaded and raises :class:`~spark_groups.errors.SparkGroupsError` when two threads call
it at once instead of hanging. docs/brokers.md, "Where Tansu differs from Kafka".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Literal, cast, get_args

from spark_groups.errors import OptionError, SparkGroupsError
from spark_groups.kafka.client import Consumer, KafkaException, create_consumer
from spark_groups.kafka.config import bootstrap_servers_of, layered
from spark_groups.kafka.confirmed_ends import ConfirmedEnds, fetch_high_watermarks
from spark_groups.kafka.list_offsets import list_offsets
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.starting import EARLIEST, LATEST

log = logging.getLogger(__name__)

#: How the log end is found: the modes, as the ``endOffsets`` option names them.
EndOffsetsMode = Literal["auto", "fetch", "listOffsets"]
END_OFFSET_MODES: tuple[str, ...] = get_args(EndOffsetsMode)

#: Cluster ids (lower-cased substrings) of brokers whose ListOffsets under-reports the log end.
UNDER_REPORTING_CLUSTERS = ("tansu",)

#: Defaults merged *under* the caller's consumer configuration (the caller's value wins).
RESOLVER_DEFAULTS: dict[str, str] = {
    "group.id": "spark-groups-offsets",  # librdkafka wants one; no group is ever joined
    # An empty partition answers the confirming fetch only when the broker gives up waiting.
    "fetch.wait.max.ms": "10",
    "log.connection.close": "false",
}

#: Settings the resolver depends on; they override the caller's configuration.
RESOLVER_REQUIRED: dict[str, str] = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    # listed - 1 may have been deleted meanwhile: then fetch from the end, which also answers.
    "auto.offset.reset": "latest",
}


def _resolver_config(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    return layered(RESOLVER_DEFAULTS, consumer_config, RESOLVER_REQUIRED)


def _normalise_mode(mode: str) -> EndOffsetsMode:
    for known in END_OFFSET_MODES:
        if str(mode).lower() == known.lower():
            return cast(EndOffsetsMode, known)
    raise OptionError("endOffsets", f"must be one of {', '.join(END_OFFSET_MODES)}; got {mode!r}")


class EndOffsetResolver:
    """Log start and end offsets of partitions; see the module documentation.

    Single-threaded: one owner calls it. Cheap to create: no consumer exists until the first
    call. Picklable (the consumer is left behind and made again on first use).

    Each call takes at most about ``timeout_s``: ListOffsets without an answer by then raises
    :class:`BrokerUnreachableError` (naming the bootstrap servers); a partition whose confirming
    fetch has not answered by then keeps its listed end (never past the log end), with a
    warning. Unknown topics or partitions raise :class:`TopicNotFoundError`.
    """

    def __init__(
        self, consumer_config: Mapping[str, str], mode: str = "auto", timeout_s: float = 30.0
    ) -> None:
        if timeout_s <= 0:
            raise OptionError("timeout", f"must be positive; got {timeout_s!r}")
        self.mode = _normalise_mode(mode)
        self._effective_mode: str | None = None if self.mode == "auto" else self.mode
        self.timeout_s = float(timeout_s)
        self._config = _resolver_config(consumer_config)
        self._consumer: Consumer | None = None
        self._close_requested = False
        self._confirmed = ConfirmedEnds()
        self._busy = threading.Lock()

    # -- public API ----------------------------------------------------------------------------

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end of every partition: the offset the next appended record will get (the
        last stable offset under ``isolation.level=read_committed``)."""
        tps = sorted(set(partitions))
        if not tps:
            return {}
        with self._owned():
            deadline = time.monotonic() + self.timeout_s
            listed = self._list(tps, LATEST, deadline)
            if self._mode_for(tps[0].topic, deadline) == "listOffsets":
                return listed
            ends, to_fetch = self._confirmed.split(listed)
            if to_fetch:
                fetched = self._fetch_high_watermarks(to_fetch, deadline)
                ends.update(self._confirmed.confirm(to_fetch, fetched))
            return {tp: ends[tp] for tp in tps}

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop the remembered ends of ``partitions``: their next :meth:`end_offsets` fetches
        again. For partitions whose log may have been replaced (newly assigned after a lost
        session, a broker restart, a recreated topic), where an unchanged listed end on Tansu
        does not mean an unchanged log."""
        with self._owned():
            self._confirmed.forget(partitions)

    def start_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The earliest offset still available (the low watermark) of every partition."""
        tps = sorted(set(partitions))
        if not tps:
            return {}
        with self._owned():
            return self._list(tps, EARLIEST, time.monotonic() + self.timeout_s)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset whose record timestamp is at or after each partition's timestamp
        (ms since the epoch); None where no record is that late (ListOffsets by time)."""
        tps = sorted(timestamps)
        if not tps:
            return {}
        with self._owned():
            found = self._list(tps, timestamps, time.monotonic() + self.timeout_s)
            return {tp: (None if offset < 0 else offset) for tp, offset in found.items()}

    def close(self) -> None:
        """Close the consumer; a later call makes a new one. Idempotent.

        Safe from a signal handler or another thread while a call is running: the consumer is
        then closed by that call as it returns, never under it.
        """
        if not self._busy.acquire(blocking=False):
            self._close_requested = True
            return
        try:
            self._close_consumer()
        finally:
            self._busy.release()

    def _close_consumer(self) -> None:
        self._close_requested = False
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.debug("closing the offsets consumer failed: %s", exc)

    def __enter__(self) -> EndOffsetResolver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_consumer=None, _busy=None, _confirmed=ConfirmedEnds(), _close_requested=False)
        if self.mode == "auto":
            state["_effective_mode"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._busy = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"EndOffsetResolver(bootstrap.servers={bootstrap_servers_of(self._config)!r}, "
            f"mode={self.mode!r}, timeout_s={self.timeout_s:g})"
        )

    @property
    def effective_mode(self) -> str | None:
        """``fetch`` or ``listOffsets``; with ``auto``, None until the first call decided."""
        return self._effective_mode

    # -- internals -----------------------------------------------------------------------------

    def _mode_for(self, topic: str, deadline: float) -> str:
        """The mode in force; ``auto`` decides once, from the cluster id in a metadata answer
        for ``topic`` (a one-topic request, cheap on clusters with many topics)."""
        if self._effective_mode is not None:
            return self._effective_mode
        cluster_id = ""
        try:
            metadata = self._get_consumer().list_topics(
                topic, timeout=max(deadline - time.monotonic(), 0.1)
            )
            cluster_id = str(metadata.cluster_id or "")
        except KafkaException as exc:  # undecided: confirm by fetch this time, ask again later
            log.debug("no cluster metadata from %s: %s", self._servers(), exc)
            return "fetch"
        under_reports = any(name in cluster_id.lower() for name in UNDER_REPORTING_CLUSTERS)
        self._effective_mode = "fetch" if under_reports else "listOffsets"
        log.info(
            "endOffsets=auto on cluster %r (%s): %s",
            cluster_id,
            self._servers(),
            "ListOffsets under-reports the log end here, confirming it with a fetch"
            if under_reports
            else "trusting ListOffsets",
        )
        return self._effective_mode

    @contextmanager
    def _owned(self) -> Iterator[None]:
        if not self._busy.acquire(blocking=False):
            raise SparkGroupsError(
                "EndOffsetResolver called from two threads at once; it is single-threaded "
                "(a confluent_kafka Consumer must only be used by one thread at a time)"
            )
        try:
            yield
        finally:
            try:
                if self._close_requested:
                    self._close_consumer()
            finally:
                self._busy.release()

    def _servers(self) -> str:
        return bootstrap_servers_of(self._config)

    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = create_consumer(self._config)
        return self._consumer

    def _list(
        self, tps: list[TopicPartition], which: int | Mapping[TopicPartition, int], deadline: float
    ) -> dict[TopicPartition, int]:
        """ListOffsets for ``tps`` (:func:`~spark_groups.kafka.list_offsets.list_offsets`)."""
        return list_offsets(
            self._get_consumer(),
            tps,
            which,
            deadline,
            config=self._config,
            timeout_s=self.timeout_s,
        )

    def _fetch_high_watermarks(
        self, listed: dict[TopicPartition, int], deadline: float
    ) -> dict[TopicPartition, int]:
        """The high watermarks a fetch at ``listed - 1`` answers
        (:func:`~spark_groups.kafka.confirmed_ends.fetch_high_watermarks`)."""
        return fetch_high_watermarks(
            self._get_consumer(), listed, deadline, config=self._config, timeout_s=self.timeout_s
        )
