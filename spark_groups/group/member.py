"""The driver's consumer-group membership.

One :class:`confluent_kafka.Consumer` joins the group (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup) and owns an assignment, but never fetches: every partition it is given is paused
at once. Its records are read by Spark tasks on executors instead.

Threading: only one thread may be inside a Consumer at a time (a second thread calling
``commit`` while another polls hangs for many seconds). So one *owner thread* creates the
consumer, polls it in short slices, runs its rebalance callbacks, and serves every other
thread's requests (commit, committed, metadata) from a queue between polls. Rebalance
callbacks may block (the revocation barrier) as long as they keep calling the ``serve``
function they are given, so that commits issued by other threads still go through.
"""

from __future__ import annotations

import logging
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar, cast

from spark_groups.errors import (
    AuthenticationError,
    AuthorizationError,
    GroupMembershipError,
)
from spark_groups.group import commits
from spark_groups.group.topics import Subscription
from spark_groups.kafka import auth
from spark_groups.kafka.client import Consumer, KafkaError, KafkaException, KafkaTopicPartition
from spark_groups.kafka.errors import config_error
from spark_groups.offsets import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")


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


class GroupMember:
    """A consumer-group member that owns partitions but never fetches their records.

    ``start()`` connects, checks the subscribed topics exist and subscribes; ``close()``
    leaves the group. All other methods are safe to call from any thread.
    """

    def __init__(
        self,
        config: Mapping[str, str],
        subscription: Sequence[str],
        listener: RebalanceListener | None = None,
        *,
        broker_timeout_s: float = 30.0,
        poll_interval_s: float = 0.05,
    ) -> None:
        self._config = dict(config)
        self._topics = Subscription(list(subscription), self._config, broker_timeout_s)
        self._listener: RebalanceListener = listener or _NoListener()
        self._broker_timeout_s = broker_timeout_s
        # The Python client does not expose the negotiated protocol; the configuration decides
        # it. KIP-848 (group.protocol=consumer) rebalances are always incremental.
        self._cooperative = self._config.get("group.protocol") == "consumer" or (
            "cooperative" in self._config.get("partition.assignment.strategy", "")
        )
        self._poll_interval_s = poll_interval_s
        self._requests: queue.SimpleQueue[tuple[Callable[[Consumer], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._owner_ident: int | None = None
        self._consumer: Consumer | None = None
        self._subscribed = threading.Event()
        self._first_assignment = threading.Event()
        self._stopped = threading.Event()
        self._closing = False
        self._failure: BaseException | None = None
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._in_callback = 0  # > 0 while a rebalance callback runs (owner thread)
        self._generation = -1
        self._member_id = ""
        self.rebalances = 0

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> GroupMember:
        """Start the owner thread, check the topics exist, subscribe. Raises on failure."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=self._run,
            name=f"spark-groups-member-{self._config.get('group.id')}",
            daemon=True,
        )
        self._thread.start()
        self._subscribed.wait(self._broker_timeout_s + 30)
        if self._failure is not None:
            raise self._failure
        if not self._subscribed.is_set():
            raise self._membership_error("the group member did not start in time")
        return self

    def close(self, timeout_s: float = 30.0) -> None:
        """Leave the group (LeaveGroup) and stop the owner thread. Idempotent."""
        self._closing = True
        thread = self._thread
        if thread is None or threading.get_ident() == self._owner_ident:
            return
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("group member did not leave the group within %.0f s", timeout_s)

    @property
    def closed(self) -> bool:
        """True once the owner thread has stopped (the member has left the group)."""
        return self._stopped.is_set()

    @property
    def closing(self) -> bool:
        """True once ``close()`` was asked for."""
        return self._closing

    # ----------------------------------------------------------------- state
    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns right now (a snapshot)."""
        return self._assignment

    @property
    def generation(self) -> int:
        """The group generation of the current assignment (-1 before the first)."""
        return self._generation

    @property
    def member_id(self) -> str:
        """The member id the coordinator gave this member ('' before joining)."""
        return self._member_id

    def wait_for_assignment(self, timeout_s: float) -> bool:
        """Wait until the first assignment (possibly empty) arrived; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            if self._first_assignment.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                return True
        return self._first_assignment.is_set()

    def check(self) -> None:
        """Raise the failure that stopped the owner thread, if any."""
        if self._failure is not None:
            raise self._failure
        if self._stopped.is_set() and not self._closing:
            raise self._membership_error("the group member stopped unexpectedly")

    # ----------------------------------------------------------------- calls
    def call(self, fn: Callable[[Consumer], T], timeout_s: float = 60.0) -> T:
        """Run ``fn(consumer)`` on the owner thread and return its result."""
        if threading.get_ident() == self._owner_ident:
            assert self._consumer is not None
            return fn(self._consumer)
        self.check()
        if self._stopped.is_set():
            raise self._membership_error("the group member is closed")
        future: Future[T] = Future()
        self._requests.put((fn, future))
        try:
            return future.result(timeout_s)
        except TimeoutError:
            raise self._membership_error(
                f"the group member did not answer within {timeout_s:.0f} s"
            ) from None

    def committed(
        self, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
    ) -> dict[TopicPartition, int]:
        """The group's committed offsets in Kafka; partitions with none are left out."""
        return {tp: o for tp, (o, _) in self.committed_with_metadata(partitions, timeout_s).items()}

    def committed_with_metadata(
        self, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
    ) -> dict[TopicPartition, tuple[int, str]]:
        """The group's committed offsets in Kafka with each commit's metadata string (""
        for none; see :mod:`spark_groups.commit_metadata`); partitions with none are left
        out."""
        return commits.committed_with_metadata(
            self.call, partitions, timeout_s, config=self._config
        )

    def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        timeout_s: float = 30.0,
        *,
        owned_only: bool = False,
        metadata: str | None = None,
    ) -> frozenset[TopicPartition]:
        """Commit ``offsets`` (next offset to read) to Kafka under the current generation;
        return the partitions committed. ``metadata`` is stored with every offset (who
        committed: :func:`spark_groups.commit_metadata.make`).

        With ``owned_only``, the owner thread first handles the rebalance events librdkafka
        has queued (a session that expired while this process was frozen shows up as lost
        partitions) and then commits only the partitions this member still owns, with no
        rebalance callback in between.

        Raises :class:`StaleGenerationError` when the coordinator refuses the commit because
        this member was fenced or a rebalance moved on, :class:`CommitError` otherwise.
        """
        return commits.commit(
            self.call,
            offsets,
            timeout_s,
            config=self._config,
            generation=lambda: self._generation,
            owned=self._owned_now if owned_only else None,
            metadata=metadata,
        )

    def subscribed_partitions(self, timeout_s: float | None = None) -> list[TopicPartition]:
        """Every partition of every topic the subscription matches, from fresh metadata."""
        timeout = timeout_s or self._broker_timeout_s
        metadata = self.call(lambda c: c.list_topics(timeout=timeout), timeout + 5)
        return self._topics.partitions(metadata)

    # ----------------------------------------------------------------- owner thread
    def serve(self, seconds: float) -> None:
        """Owner thread only: run queued requests for up to ``seconds`` (from callbacks)."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            try:
                fn, future = self._requests.get(timeout=max(0.0, min(remaining, 0.02)))
            except queue.Empty:
                if remaining <= 0:
                    return
                continue
            self._run_request(fn, future)

    def _run_request(self, fn: Callable[[Consumer], Any], future: Future[Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(cast(Consumer, self._consumer)))
        except BaseException as exc:  # handed to the caller's thread
            future.set_exception(exc)

    def _drain(self) -> None:
        while True:
            try:
                fn, future = self._requests.get_nowait()
            except queue.Empty:
                return
            self._run_request(fn, future)

    def _run(self) -> None:
        self._owner_ident = threading.get_ident()
        try:
            self._consumer = self._create_consumer()
            self._topics.check(self._consumer, lambda: self._failure)
            self._consumer.subscribe(
                self._topics.topics,
                on_assign=self._counted(self._on_assign),
                on_revoke=self._counted(self._on_revoke),
                on_lost=self._counted(self._on_lost),
            )
            log.info(
                "group member subscribed: group=%s subscription=%s protocol=%s assignor=%s",
                self._config.get("group.id"),
                self._topics.topics,
                self._config.get("group.protocol", "classic"),
                self._config.get("group.remote.assignor", "broker default")
                if self._config.get("group.protocol") == "consumer"
                else self._config.get("partition.assignment.strategy"),
            )
            self._subscribed.set()
            while not self._closing:
                self._poll_once()
                self._drain()
        except BaseException as exc:
            self._failure = exc
            if not self._subscribed.is_set():
                log.error("group member could not start: %s", exc)
            else:
                log.exception("group member failed")
        finally:
            self._leave()
            self._subscribed.set()
            self._stopped.set()
            self._fail_pending()

    def _membership_error(self, message: str) -> GroupMembershipError:
        """A :class:`GroupMembershipError` about this member's group (its id as data)."""
        return GroupMembershipError(message, group=str(self._config.get("group.id", "")))

    def _create_consumer(self) -> Consumer:
        config: dict[str, Any] = dict(self._config)
        config["error_cb"] = self._on_error
        try:
            return Consumer(config)
        except KafkaException as exc:
            raise config_error(exc) from None

    def _denied(
        self, error: KafkaError | None, topic: str | None = None
    ) -> AuthenticationError | AuthorizationError | None:
        """The typed error when ``error`` is an authentication or authorization failure."""
        if not isinstance(error, KafkaError):
            return None
        return auth.classify(error, self._config, topic)

    def _poll_once(self, timeout_s: float | None = None) -> None:
        assert self._consumer is not None
        message = self._consumer.poll(self._poll_interval_s if timeout_s is None else timeout_s)
        if message is None:
            return
        error = message.error()
        if error is not None:
            denied = self._denied(error, message.topic())
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

    def _owned_now(self, consumer: Consumer) -> frozenset[TopicPartition]:
        """The partitions owned once the rebalance events librdkafka has queued are handled;
        inside a rebalance callback nothing is polled (no poll may nest)."""
        if not self._in_callback:
            self._poll_once(0)  # runs queued rebalance callbacks (this thread)
        return self._assignment

    def _on_error(self, error: KafkaError) -> None:
        if auth.is_authentication_failure(error):
            # librdkafka retries refused credentials forever; they will not start working.
            self._failure = auth.authentication_error(error, self._config)
            self._closing = True
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            log.warning("group member: all brokers are down (%s)", error.str())
        elif error.fatal():
            self._failure = self._membership_error(f"fatal consumer error: {error.str()}")
            self._closing = True
        else:
            log.info("group member: %s", error.str())

    def _counted(
        self, callback: Callable[[Consumer, list[KafkaTopicPartition]], None]
    ) -> Callable[[Consumer, list[KafkaTopicPartition]], None]:
        """``callback`` marking that a rebalance callback runs (no poll may nest in it)."""

        def run(consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
            self._in_callback += 1
            try:
                callback(consumer, partitions)
            finally:
                self._in_callback -= 1

        return run

    def _refresh_identity(self, consumer: Consumer) -> None:
        try:
            self._member_id = consumer.memberid() or ""
            self._generation = parse_generation(consumer.consumer_group_metadata())
        except KafkaException:  # not in a group yet
            pass

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        cooperative = self._cooperative
        if cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        added = _to_ours(partitions)
        self._assignment = (self._assignment | added) if cooperative else added
        self._refresh_identity(consumer)
        self.rebalances += 1
        log.info(
            "assigned %d partitions (generation %d, member %s): %s; now own %d",
            len(added),
            self._generation,
            self._member_id,
            sorted(str(p) for p in added),
            len(self._assignment),
        )
        try:
            self._listener.on_assigned(added, self._generation)
        finally:
            self._first_assignment.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        revoked = _to_ours(partitions)
        self._refresh_identity(consumer)  # a cooperative revocation comes with a new generation
        log.info("revoking %d partitions: %s", len(revoked), sorted(str(p) for p in revoked))
        try:
            if not self._closing and revoked:
                self._listener.on_revoked(revoked, self.serve)
        finally:
            self._assignment = self._assignment - revoked

    def _on_lost(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        lost = _to_ours(partitions)
        self._assignment = self._assignment - lost
        log.warning(
            "lost %d partitions without a clean revocation (session expired or fenced): %s",
            len(lost),
            sorted(str(p) for p in lost),
        )
        self._listener.on_lost(lost)

    def _leave(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        started = time.monotonic()
        try:
            self._consumer = consumer  # callbacks during close may use call()
            consumer.close()  # revokes, commits nothing (auto commit is off), sends LeaveGroup
        except (KafkaException, RuntimeError) as exc:
            log.warning("error while leaving the group: %s", exc)
        finally:
            self._consumer = None
            self._assignment = frozenset()
        log.info("group member left the group in %.2f s", time.monotonic() - started)

    def _fail_pending(self) -> None:
        while True:
            try:
                _, future = self._requests.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                # Requests queued before the owner thread failed get the cause, not "closed".
                future.set_exception(
                    self._failure or self._membership_error("the group member is closed")
                )
