"""A member's subscription: which topics it names or matches, and whether they are there.

A subscription is a list of topic names, or one regular expression (a single entry starting
with ``^``) that may also match topics created later. Before subscribing, the member checks
that every named topic exists and that this client may see it: a missing topic is a
:class:`TopicNotFoundError`, a denied one an :class:`AuthorizationError`, refused credentials
an :class:`AuthenticationError`, and no broker answering a :class:`BrokerUnreachableError`.

Threads: :meth:`Subscription.check` runs on the member's owner thread (it uses the consumer);
the rest is pure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from spark_groups.errors import BrokerUnreachableError, TopicNotFoundError
from spark_groups.kafka import auth
from spark_groups.kafka.client import Consumer, KafkaException
from spark_groups.offsets import TopicPartition


class Subscription:
    """The ``topics`` a member subscribes to, for a client made with ``config`` that waits
    ``broker_timeout_s`` for a broker to answer."""

    def __init__(
        self, topics: list[str], config: Mapping[str, str], broker_timeout_s: float
    ) -> None:
        self.topics = topics
        self._config = config
        self._broker_timeout_s = broker_timeout_s

    @property
    def is_pattern(self) -> bool:
        """True when the subscription is one regular expression (``^...``)."""
        return len(self.topics) == 1 and self.topics[0].startswith("^")

    def matching(self, topics: Mapping[str, Any]) -> list[str]:
        """The names among ``topics`` (a metadata answer's) the subscription matches; internal
        topics (``__...``) never match a pattern."""
        if self.is_pattern:
            regex = re.compile(self.topics[0])
            return [t for t in topics if not t.startswith("__") and regex.search(t)]
        return [t for t in self.topics if t in topics]

    def partitions(self, metadata: Any) -> list[TopicPartition]:
        """Every partition of every topic the subscription matches in cluster ``metadata``
        (a ``list_topics`` answer), in order."""
        return [
            TopicPartition(name, p)
            for name in sorted(self.matching(metadata.topics))
            for p in sorted(metadata.topics[name].partitions)
        ]

    def check(self, consumer: Consumer, failure: Callable[[], BaseException | None]) -> None:
        """Owner thread, before subscribing: raise unless every named topic exists and may be
        described. ``failure`` is what the member's ``error_cb`` recorded meanwhile (refused
        credentials), raised as soon as it shows up."""
        servers = self._config.get("bootstrap.servers")
        metadata = self._metadata(consumer, failure)
        if self.is_pattern:
            return  # a pattern may match topics created later
        missing = [t for t in self.topics if t not in metadata.topics]
        for topic in missing:
            # Kafka leaves topics this client may not describe out of an all-topics answer;
            # asked by name, it says whether the topic is missing or denied.
            try:
                named = consumer.list_topics(topic, timeout=self._broker_timeout_s)
            except KafkaException:
                continue
            found = named.topics.get(topic)
            if found is not None and found.error is not None:
                denied = auth.classify(found.error, self._config, topic)
                if denied is not None:
                    raise denied
        if missing:
            raise TopicNotFoundError(
                f"topic {', '.join(repr(t) for t in missing)} does not exist on {servers}",
                topics=missing,
                servers=str(servers),
            )

    def _metadata(self, consumer: Consumer, failure: Callable[[], BaseException | None]) -> Any:
        """Cluster metadata, asked in short slices until ``broker_timeout_s``; between them
        ``poll(0)`` serves librdkafka's error callback (not called inside ``list_topics``),
        so refused credentials fail at once instead of after the whole timeout."""
        servers = self._config.get("bootstrap.servers")
        deadline = time.monotonic() + self._broker_timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                return consumer.list_topics(timeout=max(0.05, min(1.0, left)))
            except KafkaException as exc:
                message = consumer.poll(0)
                if message is not None and message.error() is not None:
                    denied = auth.classify(message.error(), self._config, message.topic())
                    if denied is not None:
                        raise denied from None
                failed = failure()
                if failed is not None:
                    raise failed from None
                if time.monotonic() >= deadline:
                    raise BrokerUnreachableError(
                        f"no broker of kafka.bootstrap.servers={servers} answered within "
                        f"{self._broker_timeout_s:.0f} s ({exc.args[0] if exc.args else exc})",
                        servers=str(servers),
                        waited_s=self._broker_timeout_s,
                    ) from None
