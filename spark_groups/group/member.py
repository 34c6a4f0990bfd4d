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
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from spark_groups.errors import (
    GroupMembershipError,
)
from spark_groups.group import commits
from spark_groups.group.callbacks import Callbacks, RebalanceListener, parse_generation
from spark_groups.group.topics import Subscription
from spark_groups.kafka.client import Consumer, KafkaException
from spark_groups.kafka.errors import config_error
from spark_groups.offsets import TopicPartition

__all__ = ["GroupMember", "RebalanceListener", "parse_generation"]

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        self._broker_timeout_s = broker_timeout_s
        self._requests: queue.SimpleQueue[tuple[Callable[[Consumer], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._owner_ident: int | None = None
        self._consumer: Consumer | None = None
        self._subscribed = threading.Event()
        self._stopped = threading.Event()
        self._closing = False
        self._failure: BaseException | None = None
        self._callbacks = Callbacks(
            self._config,
            listener,
            serve=self.serve,
            closing=lambda: self._closing,
            fail=self._fail,
            poll_interval_s=poll_interval_s,
        )

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
        return self._callbacks.assignment

    @property
    def generation(self) -> int:
        """The group generation of the current assignment (-1 before the first)."""
        return self._callbacks.generation

    @property
    def member_id(self) -> str:
        """The member id the coordinator gave this member ('' before joining)."""
        return self._callbacks.member_id

    @property
    def rebalances(self) -> int:
        """How many assignments this member has received."""
        return self._callbacks.rebalances

    # Tests stand in for librdkafka by setting these (tests/unit/test_stream.py).
    @property
    def _assignment(self) -> frozenset[TopicPartition]:
        return self._callbacks.assignment

    @_assignment.setter
    def _assignment(self, partitions: frozenset[TopicPartition]) -> None:
        self._callbacks.assignment = partitions

    @property
    def _generation(self) -> int:
        return self._callbacks.generation

    @_generation.setter
    def _generation(self, generation: int) -> None:
        self._callbacks.generation = generation

    def wait_for_assignment(self, timeout_s: float) -> bool:
        """Wait until the first assignment (possibly empty) arrived; False on timeout."""
        first = self._callbacks.first_assignment
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            if first.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                return True
        return first.is_set()

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
            generation=lambda: self._callbacks.generation,
            owned=self._callbacks.owned_now if owned_only else None,
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
            self._callbacks.subscribe(self._consumer, self._topics.topics)
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
                self._callbacks.poll(self._consumer)
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

    def _fail(self, failure: BaseException) -> None:
        """Stop with ``failure`` after the current poll (librdkafka's ``error_cb``)."""
        self._failure = failure
        self._closing = True

    def _create_consumer(self) -> Consumer:
        config: dict[str, Any] = dict(self._config)
        config["error_cb"] = self._callbacks.on_error
        try:
            return Consumer(config)
        except KafkaException as exc:
            raise config_error(exc) from None

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
            self._callbacks.assignment = frozenset()
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
