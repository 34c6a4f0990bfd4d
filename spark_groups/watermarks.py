"""Log start and end offsets you can trust, on Kafka and on brokers that under-report.

Kafka's ListOffsets(latest) returns the high watermark. Some Kafka-compatible brokers (the
embedded Tansu broker among them) return the base offset of the last record batch + 1
instead, which would leave the tail of every partition unread. The high watermark carried
in every *fetch* response is right on both, so in ``fetch`` mode (the default) the resolver
asks ListOffsets, then fetches once from just below that answer and takes the high watermark
the fetch reported. On Kafka the fetch returns at most the last record and confirms the
ListOffsets answer; ``listOffsets`` mode skips it.

A resolver owns one assign-only consumer (never a group member). confluent-kafka allows one
thread inside a consumer at a time: a resolver belongs to the thread that calls it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException

from spark_groups.errors import BrokerUnreachableError, SparkGroupsError
from spark_groups.offsets import TopicPartition

log = logging.getLogger(__name__)

MODES = ("fetch", "listOffsets")


class EndOffsetResolver:
    """Finds the first and the next-to-be-written offset of partitions."""

    def __init__(
        self, consumer_config: Mapping[str, str], mode: str = "fetch", timeout_s: float = 30.0
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self._config = dict(consumer_config)
        self._mode = mode
        self._timeout_s = timeout_s
        self._consumer: Consumer | None = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            config: dict[str, object] = {
                **self._config,
                "enable.auto.commit": "false",
                "enable.partition.eof": "true",
                "fetch.wait.max.ms": "10",
            }
            config.setdefault("group.id", "spark-groups-end-offsets")
            self._consumer = Consumer(config)
        return self._consumer

    def close(self) -> None:
        """Close the probe consumer. The resolver can be used again afterwards."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def _watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        kafka_tp = confluent_kafka.TopicPartition(tp.topic, tp.partition)
        try:
            low, high = self._client().get_watermark_offsets(kafka_tp, timeout=self._timeout_s)
        except KafkaException as exc:
            raise self._failure(tp, exc) from None
        return int(low), int(high)

    def _failure(self, tp: TopicPartition, exc: KafkaException) -> SparkGroupsError:
        error = exc.args[0] if exc.args else exc
        servers = self._config.get("bootstrap.servers", "?")
        if isinstance(error, KafkaError) and error.code() in (
            KafkaError._TRANSPORT,
            KafkaError._TIMED_OUT,
            KafkaError._ALL_BROKERS_DOWN,
        ):
            return BrokerUnreachableError(
                f"no broker of kafka.bootstrap.servers={servers} answered the offsets request "
                f"for {tp} within {self._timeout_s:.0f} s ({error})"
            )
        return SparkGroupsError(f"could not read the offsets of {tp}: {error}")

    def start_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The earliest offset still in the log (the low watermark) of each partition."""
        return {tp: self._watermarks(tp)[0] for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end (high watermark; last stable offset under read_committed)."""
        listed = {tp: self._watermarks(tp) for tp in partitions}
        ends = {tp: high for tp, (_, high) in listed.items()}
        if self._mode == "fetch":
            probe = {tp: max(low, high - 1) for tp, (low, high) in listed.items() if high > low}
            for tp, fetched in self._fetched_high_watermarks(probe).items():
                if fetched > ends[tp]:
                    log.debug("%s: ListOffsets said %d, a fetch says %d", tp, ends[tp], fetched)
                    ends[tp] = fetched
        return ends

    def _fetched_high_watermarks(
        self, probe: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Fetch once from ``probe[tp]`` and return the high watermark each fetch reported."""
        if not probe:
            return {}
        consumer = self._client()
        consumer.assign(
            [
                confluent_kafka.TopicPartition(tp.topic, tp.partition, off)
                for tp, off in probe.items()
            ]
        )
        waiting = set(probe)
        deadline = time.monotonic() + self._timeout_s
        try:
            while waiting and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=len(waiting) * 64, timeout=0.01):
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        log.warning("end-offset probe: %s", error)
                        continue
                    waiting.discard(TopicPartition(message.topic(), message.partition()))
            if waiting:
                log.warning(
                    "end-offset probe got no fetch response for %s within %.0f s; "
                    "using ListOffsets for them",
                    sorted(str(tp) for tp in waiting),
                    self._timeout_s,
                )
            result = {}
            for tp in probe:
                if tp in waiting:
                    continue
                kafka_tp = confluent_kafka.TopicPartition(tp.topic, tp.partition)
                _, high = consumer.get_watermark_offsets(kafka_tp, cached=True)
                if high >= 0:
                    result[tp] = int(high)
            return result
        finally:
            consumer.unassign()
