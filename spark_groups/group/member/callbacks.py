"""What librdkafka tells the group member, and what the member keeps of it.

librdkafka calls back from inside ``poll()`` (and ``close()``) on the member's owner thread:

* the rebalance callbacks. :class:`Callbacks` (un)assigns and pauses the partitions, then
  calls the :class:`RebalanceListener`: ``on_assigned`` with the new generation,
  ``on_revoked`` with a ``serve`` function (the group waits for it to return; a listener that
  waits keeps other threads' requests going by calling it), ``on_lost``;
* ``error_cb``: refused credentials and fatal errors stop the member (they will not heal);
  anything else is logged;
* and ``poll()`` itself returns error events: a denied topic or group and fatal errors stop
  the member, others are logged. (A record fetched before a pause landed is dropped: the
  executors read records, never the driver.)

:class:`Callbacks` keeps what the rebalances leave: the assignment, the generation and member
id, the number of assignments, whether the first one arrived.

Threads: every method runs on the owner thread. The state is read from any thread: each value
is replaced, never changed in place, so a reader sees a consistent snapshot.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from spark_groups.errors import GroupMembershipError
from spark_groups.kafka import auth
from spark_groups.kafka.client import Consumer, KafkaError, KafkaException, KafkaTopicPartition
from spark_groups.kafka.logs import FoldedLog
from spark_groups.offsets import TopicPartition, partitions_text

#: The member's logger: its assignment events are documented under this name (groups.md).
log = logging.getLogger("spark_groups.group.member")
_folded = FoldedLog(log)


class RebalanceListener(Protocol):
    """What the member tells about its assignment. Called on the member's owner thread."""

    def on_assigned(self, partitions: frozenset[TopicPartition], generation: int) -> None:
        """Partitions were added to this member's assignment."""

    def on_revoked(
        self, partitions: frozenset[TopicPartition], serve: Callable[[float], None]
    ) -> None:
        """Partitions are being taken away. The group waits until this returns; a listener
        that waits must call ``serve(seconds)`` in its loop to keep serving other threads."""

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """Partitions were lost without a clean revocation (session expired, fenced)."""


def parse_generation(group_metadata: object) -> int:
    """The generation id inside librdkafka's serialized consumer group metadata, or -1.

    ``Consumer.consumer_group_metadata()`` returns librdkafka's ``CGMDv2:`` blob: the magic,
    then the generation id as a native-endian int32, then group and member ids.
    """
    if isinstance(group_metadata, bytes) and group_metadata.startswith(b"CGMDv2:"):
        start = len(b"CGMDv2:")
        (generation,) = struct.unpack_from("=i", group_metadata, start)
        return int(generation)
    return -1


def _to_ours(partitions: Iterable[KafkaTopicPartition]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(p.topic, p.partition) for p in partitions)


class _NoListener:
    def on_assigned(self, partitions: frozenset[TopicPartition], generation: int) -> None:
        pass

    def on_revoked(
        self, partitions: frozenset[TopicPartition], serve: Callable[[float], None]
    ) -> None:
        pass

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        pass


class Callbacks:
    """librdkafka's callbacks and poll events for one member (see the module documentation).

    ``serve`` runs other threads' requests for some seconds (handed to ``on_revoked``);
    ``closing`` says whether the member is leaving (its assignments and revocations then skip
    the listener, and the member's identity is not read again: :meth:`_refresh_identity`);
    ``fail`` stops the member with a failure, for ``error_cb``, which cannot raise.

    State, read from any thread: ``assignment`` (the partitions owned now), ``generation``
    (-1 before the first assignment), ``member_id`` ('' before joining), ``rebalances`` (how
    many assignments arrived) and ``first_assignment`` (set once the first, possibly empty,
    did).
    """

    def __init__(
        self,
        config: Mapping[str, str],
        listener: RebalanceListener | None,
        *,
        serve: Callable[[float], None],
        closing: Callable[[], bool],
        fail: Callable[[BaseException], None],
        poll_interval_s: float,
    ) -> None:
        self._config = config
        self._listener: RebalanceListener = listener or _NoListener()
        self._serve = serve
        self._closing = closing
        self._fail = fail
        self._poll_interval_s = poll_interval_s
        # The Python client does not expose the negotiated protocol; the configuration decides
        # it. KIP-848 (group.protocol=consumer) rebalances are always incremental.
        self._cooperative = config.get("group.protocol") == "consumer" or (
            "cooperative" in config.get("partition.assignment.strategy", "")
        )
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.generation = -1
        self.member_id = ""
        self.rebalances = 0
        self.first_assignment = threading.Event()
        #: Rebalance callbacks run so far (assignments, revocations, losses).
        self.events = 0

    def subscribe(self, consumer: Consumer, topics: list[str]) -> None:
        """Subscribe ``consumer`` to ``topics`` with this member's rebalance callbacks."""
        consumer.subscribe(
            topics, on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )

    def poll(self, consumer: Consumer, timeout_s: float | None = None) -> None:
        """Poll once (``poll_interval_s`` by default): librdkafka runs the callbacks due;
        an error event that must stop the member is raised."""
        message = consumer.poll(self._poll_interval_s if timeout_s is None else timeout_s)
        if message is None:
            return
        error = message.error()
        if error is not None:
            denied = auth.classify(error, self._config, message.topic())
            if denied is not None:
                raise denied
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.warning("subscribed topic is gone: %s", error)
            elif error.fatal():
                raise self._membership_error(f"fatal consumer error: {error}")
            else:
                log.warning("group member: %s", error)
            return
        # Paused partitions should never deliver; a record fetched before the pause landed
        # is dropped here: executors read it, never the driver.
        log.debug("dropped a record the driver fetched before pausing %s", message.topic())

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb``: stop on refused credentials or a fatal error."""
        if auth.is_authentication_failure(error):
            # librdkafka retries refused credentials forever; they will not start working.
            self._fail(auth.authentication_error(error, self._config))
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            _folded.log(logging.WARNING, f"group member: all brokers are down ({error.str()})")
        elif error.fatal():
            self._fail(self._membership_error(f"fatal consumer error: {error.str()}"))
        else:  # librdkafka logs the same through spark_groups.kafka.librdkafka
            log.debug("group member: %s", error.str())

    def on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Assign and pause ``partitions``, then tell the listener (``on_assigned``, unless the
        member is leaving)."""
        self.events += 1
        cooperative = self._cooperative
        if cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        added = _to_ours(partitions)
        self.assignment = (self.assignment | added) if cooperative else added
        closing = self._closing()
        self._refresh_identity(consumer, closing)
        self.rebalances += 1
        log.info(
            "assigned %d partitions (generation %d, member %s): %s; now own %d%s",
            len(added),
            self.generation,
            self.member_id,
            partitions_text(added),
            len(self.assignment),
            " while leaving the group" if closing else "",
        )
        try:
            if not closing:  # a leaving member reads nothing more
                self._listener.on_assigned(added, self.generation)
        finally:
            self.first_assignment.set()

    def on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Tell the listener (``on_revoked``, unless the member is leaving), then drop
        ``partitions`` from the assignment; librdkafka unassigns them after this returns."""
        self.events += 1
        revoked = _to_ours(partitions)
        closing = self._closing()
        self._refresh_identity(consumer, closing)  # a cooperative revocation: a new generation
        log.info("revoking %d partitions: %s", len(revoked), partitions_text(revoked))
        try:
            if not closing and revoked:
                self._listener.on_revoked(revoked, self._serve)
        finally:
            self.assignment = self.assignment - revoked

    def on_lost(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Drop ``partitions`` from the assignment, then tell the listener (``on_lost``,
        unless the member is leaving)."""
        self.events += 1
        lost = _to_ours(partitions)
        self.assignment = self.assignment - lost
        log.warning(
            "lost %d partitions without a clean revocation (session expired or fenced): %s",
            len(lost),
            partitions_text(lost),
        )
        if not self._closing():
            self._listener.on_lost(lost)

    def _refresh_identity(self, consumer: Consumer, closing: bool) -> None:
        """Read the member id and generation from the client, unless the member is leaving:
        close() runs the rebalance callbacks as the client shuts down, when a request to the
        group's handler may never be answered (librdkafka issue 4041, rebalance_protocol()
        there), and confluent-kafka holds the GIL through ``memberid()`` and
        ``consumer_group_metadata()``, which would freeze every thread of the process. A
        leaving member's identity is of no further use.
        """
        if closing:
            return
        try:
            self.member_id = consumer.memberid() or ""
            self.generation = parse_generation(consumer.consumer_group_metadata())
        except KafkaException:  # not in a group yet
            pass

    def _membership_error(self, message: str) -> GroupMembershipError:
        return GroupMembershipError(message, group=str(self._config.get("group.id", "")))
