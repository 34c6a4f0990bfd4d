"""The driver's consumer-group membership, as one object over its parts.

One :class:`confluent_kafka.Consumer` joins the group (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup) and owns an assignment, but never fetches: every partition it is given is paused
at once. Its records are read by Spark tasks on executors instead.

A member's life:

1. ``GroupMember(config, subscription, listener)`` puts its parts together; nothing connects.
2. ``start()`` starts the *owner thread* (:mod:`~spark_groups.group.member.owner`), the only thread
   that ever touches the consumer: only one thread may be inside it at a time (a second
   thread calling ``commit`` while another polls hangs for many seconds). There it creates the
   consumer, checks the subscribed topics exist and may be seen
   (:mod:`~spark_groups.group.member.topics`), and subscribes. ``start()`` returns then, or raises
   what failed.
3. The owner thread polls in short slices. Inside ``poll()`` librdkafka runs the callbacks
   (:mod:`~spark_groups.group.member.callbacks`): assigned partitions are paused and handed to the
   :class:`RebalanceListener`, revoked and lost ones taken away; refused credentials, denied
   topics and fatal errors stop the member.
4. Between polls it runs what other threads ask for with :meth:`GroupMember.call`: offset
   commits and fetches (:mod:`~spark_groups.group.member.commits`), metadata, the driver's
   requests. A call never polls, so no rebalance callback runs inside one. A revocation may
   block (the revocation barrier) as long as it calls the ``serve`` function it is given,
   so that other threads' calls still go through.
5. ``close()``, or a failure, ends the loop: ``consumer.close()`` revokes the partitions
   (without asking the listener after ``close()``) and sends LeaveGroup; requests still
   queued fail with the cause. Before it, the member serves what is still on its way to it
   (a static member asks the coordinator: :mod:`~spark_groups.group.member.coordinator_view`).

Threads: every method and property may be used from any thread, except ``serve``: owner
thread only (from a listener's callback). The listener is called on the owner thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from spark_groups.errors import GroupMembershipError, SparkGroupsError
from spark_groups.group.member import commits, coordinator_view
from spark_groups.group.member.callbacks import Callbacks, RebalanceListener, parse_generation
from spark_groups.group.member.owner import OwnerThread
from spark_groups.group.member.topics import Subscription
from spark_groups.kafka.classify import config_error
from spark_groups.kafka.client import Consumer, KafkaException
from spark_groups.kafka.logs import with_logger
from spark_groups.offsets import TopicPartition

__all__ = ["GroupMember", "RebalanceListener", "parse_generation"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a leaving member serves its last rebalance callbacks before it closes.
LEAVE_DRAIN_S = 10.0


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
        self._broker_timeout_s = broker_timeout_s
        self._topics = Subscription(list(subscription), self._config, broker_timeout_s)
        self._owner: OwnerThread[Consumer] = OwnerThread(
            f"spark-groups-member-{self._config.get('group.id')}",
            "group member",
            create=self._create_consumer,
            setup=self._subscribe,
            step=lambda consumer: self._callbacks.poll(consumer),
            close=self._leave,
            error=self._membership_error,
            log=log,
            # Polls do not wait; the thread waits on its requests between them instead, so a
            # commit runs at once (owner.py): at most poll_interval_s between two polls.
            idle_s=poll_interval_s,
        )
        self._callbacks = Callbacks(
            self._config,
            listener,
            serve=self._owner.serve,
            closing=lambda: self._owner.closing,
            fail=self._owner.fail,
            poll_interval_s=0.0,
        )

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> GroupMember:
        """Start the owner thread, check the topics exist, subscribe. Raises on failure."""
        self._owner.start(self._broker_timeout_s + 30)
        return self

    def close(self, timeout_s: float = 30.0) -> None:
        """Leave the group (LeaveGroup) and stop the owner thread. Idempotent."""
        if not self._owner.stop(timeout_s):
            log.warning("group member did not leave the group within %.0f s", timeout_s)

    @property
    def closed(self) -> bool:
        """True once the owner thread has stopped (the member has left the group)."""
        return self._owner.stopped

    @property
    def closing(self) -> bool:
        """True once ``close()`` was asked for."""
        return self._owner.closing

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
        self._owner.check()

    # ----------------------------------------------------------------- calls
    def call(self, fn: Callable[[Consumer], T], timeout_s: float = 60.0) -> T:
        """Run ``fn(consumer)`` on the owner thread and return its result."""
        return self._owner.call(fn, timeout_s)

    def committed(
        self, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
    ) -> dict[TopicPartition, int]:
        """The group's committed offsets in Kafka; partitions with none are left out."""
        return {tp: o for tp, (o, _) in self.committed_with_metadata(partitions, timeout_s).items()}

    def committed_with_metadata(
        self, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
    ) -> dict[TopicPartition, tuple[int, str]]:
        """The group's committed offsets in Kafka with each commit's metadata string (""
        for none; see :mod:`spark_groups.offsets.commit_metadata`); partitions with none are left
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
        committed: :func:`spark_groups.offsets.commit_metadata.make`).

        With ``owned_only`` only the partitions this member owns when the owner thread runs
        the commit are committed (no rebalance callback runs inside a call: a lost
        partition is gone from the assignment once its callback ran, and until then Kafka
        refuses a commit under the expired generation).

        Raises :class:`StaleGenerationError` when the coordinator refuses the commit because
        this member was fenced or a rebalance moved on, :class:`CommitError` otherwise.
        """
        return commits.commit(
            self.call,
            offsets,
            timeout_s,
            config=self._config,
            generation=lambda: self._callbacks.generation,
            owned=(lambda _consumer: self._callbacks.assignment) if owned_only else None,
            metadata=metadata,
        )

    def subscribed_partitions(self, timeout_s: float | None = None) -> list[TopicPartition]:
        """Every partition of every topic the subscription matches, from fresh metadata."""
        timeout = timeout_s or self._broker_timeout_s
        metadata = self.call(lambda c: c.list_topics(timeout=timeout), timeout + 5)
        return self._topics.partitions(metadata)

    def serve(self, seconds: float) -> None:
        """Owner thread only: run queued requests for up to ``seconds`` (from callbacks)."""
        self._owner.serve(seconds)

    def on_owner_thread(self) -> bool:
        """True when the calling thread is the member's owner thread (where the assignment
        and the generation change, so waiting there for them to change never ends)."""
        return self._owner.on_owner_thread()

    # ----------------------------------------------------------------- owner thread
    def _create_consumer(self) -> Consumer:
        config: dict[str, Any] = dict(self._config)
        config["error_cb"] = self._callbacks.on_error
        try:
            return Consumer(with_logger(config))
        except KafkaException as exc:
            raise config_error(exc) from None

    def _subscribe(self, consumer: Consumer) -> None:
        self._topics.check(consumer, lambda: self._owner.failure)
        self._callbacks.subscribe(consumer, self._topics.topics)
        log.info(
            "group member subscribed: group=%s subscription=%s protocol=%s assignor=%s",
            self._config.get("group.id"),
            self._topics.topics,
            self._config.get("group.protocol", "classic"),
            self._config.get("group.remote.assignor", "broker default")
            if self._config.get("group.protocol") == "consumer"
            else self._config.get("partition.assignment.strategy"),
        )

    def _leave(self, consumer: Consumer) -> None:
        """Serve the rebalance callbacks still on their way at polls, then close: an
        assignment that close() itself has to deliver can make its (un)assign call wait
        forever, holding the GIL, so the whole process stops (librdkafka issue 4884, seen
        here as a scheduled run closed while the group handed it a partition). A dynamic
        member unsubscribes first and polls until nothing more comes. A static member
        (``group.instance.id``) must not unsubscribe (that leaves the group, and its place is
        kept for its next run): it polls until the coordinator shows nothing in flight
        (:meth:`_settle`)."""
        started = time.monotonic()
        deadline = started + LEAVE_DRAIN_S
        try:
            if not self._config.get("group.instance.id"):
                consumer.unsubscribe()
                while time.monotonic() < deadline:
                    events = self._callbacks.events
                    self._callbacks.poll(consumer, 0.1)
                    if self._callbacks.events == events and not consumer.assignment():
                        break
            else:
                self._settle(consumer, deadline)
            consumer.close()  # commits nothing (auto commit is off); LeaveGroup if dynamic
        except (KafkaException, RuntimeError, SparkGroupsError) as exc:
            log.warning("error while leaving the group: %s", exc)
        finally:
            self._callbacks.assignment = frozenset()
        log.info("group member left the group in %.2f s", time.monotonic() - started)

    def _settle(self, consumer: Consumer, deadline: float) -> None:
        """Poll until the coordinator shows no assignment on its way to this member
        (:meth:`GroupView.settled_for`), or until ``deadline`` (then close anyway)."""
        admin = coordinator_view.admin_for(self._config)
        group_id = str(self._config.get("group.id", ""))
        partitions: list[TopicPartition] = []
        while time.monotonic() < deadline:
            self._callbacks.poll(consumer, 0.1)
            if not partitions:  # a subscription's partitions, asked until answered
                try:
                    partitions = self._topics.partitions(consumer.list_topics(timeout=5))
                except KafkaException as exc:
                    log.debug("no metadata while leaving: %s", exc)
                    continue
            try:
                view = coordinator_view.describe(
                    admin, group_id, max(0.1, deadline - time.monotonic())
                )
            except coordinator_view.GroupsNotDescribed as exc:
                log.info("closing without waiting for group %s to settle: %s", group_id, exc)
                return
            delivered = self._callbacks.assignment
            if view is not None and view.settled_for(self.member_id, delivered, partitions):
                return
        log.info("closing with a rebalance of group %s still in progress", group_id)

    def _membership_error(self, message: str) -> GroupMembershipError:
        """A :class:`GroupMembershipError` about this member's group (its id as data)."""
        return GroupMembershipError(message, group=str(self._config.get("group.id", "")))
