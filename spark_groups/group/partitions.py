"""The driver's state of every partition it owns: one object per partition, with a status.

A partition the group assigned to this member goes through these states (the model is
aiokafka's ``consumer/subscription_state.py``)::

    (not in the table) --begin_resume or committed--> AWAITING_RESUME --resume--> ACTIVE
                                                            ^                     |
                                                            +------ fenced -------+
    ACTIVE --begin_revoke or released--> REVOKING --give_up--> (gone)
    ACTIVE: planned / committed / moved_to_end; any state --give_up (lost)--> (gone)

* ``AWAITING_RESUME``: owned, no planning position yet: the next plan finds where it resumes
  (``group.arrivals``). The state exists from the moment that search begins
  (:meth:`PartitionTable.begin_resume`), so a revocation during the search removes it, and
  the search's answer, read for an assignment that is gone, is dropped (:meth:`resume`
  refuses a partition without a state) instead of bringing the partition back. A commit of a
  batch that read it (a replay committed before the next plan resolved where it resumes), or
  a batch the sink's table fenced (:meth:`fenced`), also puts it here.
* ``ACTIVE``: owned, with a *position* (the next offset to plan); planned in every batch.
* ``REVOKING``: the group is taking it away; never planned again; the revocation barrier
  waits for :attr:`PartitionState.last_batch` to be committed.
* Given up (lost, or its revocation finished): the state is dropped, and the last batch this
  member had planned by then is remembered: batches up to it may never commit the partition
  again (another member may have moved on), also after it is assigned here again.

Three facts about an owned partition ride on its state and go when it is given up:

* its *handover*: the range another consumer of the group committed where it resumed
  (:class:`~spark_groups.offsets.Handover`); the first batch that reads from there carries
  it, so the sink accepts exactly that gap;
* its *hold*: the sink's table would get a gap nothing explains (``group.holds``); a held
  partition is owned but not read until the table reaches its position;
* its *claim*: with ``sink.table``, the token under which this member may write it into the
  sink's table (``spark_groups.sink.claim_tokens``); every batch that reads it carries the token.
  A member that *releases* a partition (leaving, or a barrier that timed out) stops planning
  it at once, and no batch planned until then may commit it (:meth:`PartitionTable.released`).

The two invariants of the offsets live here and are unit-tested without a broker:

1. never commit below what is known committed (:meth:`PartitionTable.committable`);
2. never commit a partition that was given up, by a batch planned before it was given up.

The member's owner thread alone calls it (``group.state``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from spark_groups.group.holds import Held
from spark_groups.offsets import Handover, OffsetRange, TopicPartition


class Status(enum.Enum):
    """Where a partition owned by this member stands (see the module documentation)."""

    AWAITING_RESUME = "awaiting-resume"
    ACTIVE = "active"
    REVOKING = "revoking"


@dataclass
class PartitionState:
    """What the driver knows about one owned partition."""

    status: Status
    #: The next offset to plan (ACTIVE only).
    position: int | None = None
    #: The highest offset known committed (ledger or Kafka); commits never go below it.
    committed: int | None = None
    #: The last planned batch that read this partition (-1: none); the barrier waits for it.
    last_batch: int = -1
    #: What another consumer of the group committed where this partition resumed, if so.
    handover: Handover | None = None
    #: Why the partition is held back (not planned), if it is.
    held: Held | None = None
    #: The claim token this member writes it into the sink's table under (None: no claim).
    claim: int | None = None


class PartitionTable:
    """Every owned partition's :class:`PartitionState`, and the partitions given up."""

    def __init__(self) -> None:
        self._states: dict[TopicPartition, PartitionState] = {}
        # Per partition, the last batch planned before it was given up.
        self._gave_up_through: dict[TopicPartition, int] = {}

    def get(self, tp: TopicPartition) -> PartitionState | None:
        """The state of ``tp``, or None when it is not owned (or not known yet)."""
        return self._states.get(tp)

    # ------------------------------------------------------------------ queries

    def begin_resume(self, assignment: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The partitions of ``assignment`` without a position that are not being revoked,
        sorted: where they resume must be found before they are planned. Each gets an
        AWAITING_RESUME state now, so a revocation before :meth:`resume` is seen there.

        Caller: ``Arrivals`` at every plan. Affects: absent -> AWAITING_RESUME.
        """
        out = []
        for tp in assignment:
            state = self._states.get(tp)
            if state is None:
                state = self._states[tp] = PartitionState(Status.AWAITING_RESUME)
            if state.status is Status.AWAITING_RESUME:
                out.append(tp)
        return sorted(out)

    def resuming(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The ``partitions`` still owned, sorted: AWAITING_RESUME or ACTIVE (a partition
        revoked or lost since :meth:`begin_resume` is neither). What a claim in the sink's
        table may cover (``group.claims``)."""
        return sorted(
            tp
            for tp in partitions
            if (state := self._states.get(tp)) is not None
            and state.status in (Status.AWAITING_RESUME, Status.ACTIVE)
        )

    def plannable(
        self, assignment: frozenset[TopicPartition], *, held: bool = True
    ) -> dict[TopicPartition, int]:
        """Position of every ACTIVE partition that is still in ``assignment`` (without the
        held ones when ``held`` is False: those are the partitions a batch may read)."""
        return {
            tp: s.position
            for tp, s in self._states.items()
            if s.status is Status.ACTIVE
            and s.position is not None
            and tp in assignment
            and (held or s.held is None)
        }

    def handover_into(self, r: OffsetRange) -> Handover | None:
        """The handover a batch reading ``r`` carries: its partition's, when ``r`` starts
        exactly where the other consumer's commit ended (the partition's first range)."""
        state = self._states.get(r.topic_partition)
        handover = state.handover if state is not None else None
        return handover if handover is not None and handover.until == r.from_offset else None

    def claims(self) -> dict[TopicPartition, int]:
        """The claim token of every ACTIVE partition that has one (what a batch carries)."""
        return {
            tp: s.claim
            for tp, s in self._states.items()
            if s.status is Status.ACTIVE and s.claim is not None
        }

    def claimed(self) -> dict[TopicPartition, int]:
        """The claim token of every owned partition that has one, ACTIVE or REVOKING (what a
        member that leaves must release: a revocation in progress still holds its claim)."""
        return {tp: s.claim for tp, s in self._states.items() if s.claim is not None}

    def unclaimed(self, assignment: frozenset[TopicPartition]) -> list[TopicPartition]:
        """The ACTIVE partitions of ``assignment`` without a claim, sorted."""
        return sorted(
            tp
            for tp, s in self._states.items()
            if s.status is Status.ACTIVE and s.claim is None and tp in assignment
        )

    def held(self) -> dict[TopicPartition, Held]:
        """Every held partition, and why."""
        return {tp: s.held for tp, s in self._states.items() if s.held is not None}

    def is_at(self, tp: TopicPartition, position: int) -> bool:
        """True when ``tp`` is ACTIVE at ``position`` (a plan made from it is still valid)."""
        state = self._states.get(tp)
        return state is not None and state.status is Status.ACTIVE and state.position == position

    def may_commit(self, tp: TopicPartition, batch: int) -> bool:
        """False when ``batch`` was planned before ``tp`` was given up or released here: it
        may never commit ``tp`` (invariant 2)."""
        return batch > self._gave_up_through.get(tp, -1)

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """The highest known committed offset of every owned partition that has one."""
        return {tp: s.committed for tp, s in self._states.items() if s.committed is not None}

    def committable(
        self,
        batch: int,
        ranges: Sequence[OffsetRange],
        owned: frozenset[TopicPartition],
        claims: Mapping[TopicPartition, int] | None = None,
    ) -> list[OffsetRange]:
        """The ranges of ``batch`` that may be committed: their partition is in ``owned``, was
        not given up after ``batch`` was planned, was read under the partition's current
        claim when ``claims`` (the batch's tokens) names one (the sink leaves out what was
        read under another: a batch of this member's before a restart, say), and the range
        ends past what is committed.

        Caller: ``BatchCommitter`` (``group.committer``), before committing. Affects: nothing.
        """
        kept = []
        claims = claims or {}
        for r in ranges:
            tp = r.topic_partition
            state = self._states.get(tp)
            committed = state.committed if state is not None and state.committed is not None else -1
            token = claims.get(tp)
            if (
                tp in owned
                and self.may_commit(tp, batch)
                and (token is None or (state is not None and state.claim == token))
                and r.until_offset > committed
            ):
                kept.append(r)
        return kept

    # ------------------------------------------------------------------ transitions

    def resume(self, tp: TopicPartition, position: int, committed: int | None = None) -> int | None:
        """Give ``tp`` its first position; return it (None: ``tp`` is being revoked, or was
        given up since :meth:`begin_resume`, and keeps no position).

        With ``committed`` (where the ledger, Kafka or the sink say the group stands) the
        position is the furthest of it and any commit already seen here.
        Caller: ``Arrivals`` resolving new partitions. Affects: AWAITING_RESUME -> ACTIVE.
        """
        state = self._states.get(tp)
        if state is None or state.status is not Status.AWAITING_RESUME:
            return None
        if committed is not None:
            seen = state.committed
            state.committed = max(committed, seen) if seen is not None else committed
            position = state.committed
        state.status = Status.ACTIVE
        state.position = position
        return position

    def fenced(self, tp: TopicPartition) -> None:
        """The sink's table left a batch of ``tp`` out because ``tp``'s claim there is no
        longer this member's token while the group still gives ``tp`` to this member: find
        where it resumes again (claim it anew, read the table's position) instead of planning
        on past what the table holds.

        Caller: ``BatchCommitter`` at the safe point. Affects: ACTIVE -> AWAITING_RESUME.
        """
        state = self._states.get(tp)
        if state is not None and state.status is Status.ACTIVE:
            state.status = Status.AWAITING_RESUME
            state.position = None
            state.claim = None
            state.handover = None

    def set_handover(self, tp: TopicPartition, handover: Handover | None) -> None:
        """``tp`` resumed where ``handover`` ended (None: at a position of the group's own).

        Caller: the resume of newly assigned partitions, after :meth:`resume`. Affects: the
        ``handover`` of ``tp``'s state, if it has one.
        """
        state = self._states.get(tp)
        if state is not None:
            state.handover = handover

    def set_claim(self, tp: TopicPartition, token: int) -> None:
        """This member claimed ``tp`` in the sink's table with ``token``.

        Caller: the resume of newly assigned partitions, or a late claim once the table
        exists. Affects: ``claim`` of an ACTIVE partition's state.
        """
        state = self._states.get(tp)
        if state is not None and state.status is Status.ACTIVE:
            state.claim = token

    def hold(self, held: Mapping[TopicPartition, Held]) -> None:
        """Hold back ``held``'s partitions: owned, not planned until :meth:`release`.

        Caller: the resume of newly assigned partitions. Affects: ``held`` of owned states.
        """
        for tp, why in held.items():
            state = self._states.get(tp)
            if state is not None:
                state.held = why

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Plan ``partitions`` again (the sink's table reached their position).

        Affects: ``held`` of their states.
        """
        for tp in partitions:
            state = self._states.get(tp)
            if state is not None:
                state.held = None

    def planned(self, batch: int, ranges: Iterable[OffsetRange]) -> None:
        """``batch`` reads ``ranges``: their partitions' positions move to the ranges' ends.

        Caller: the plan (in the request that also checked :meth:`is_at`). Affects:
        ``position`` and ``last_batch`` of ACTIVE partitions.
        """
        for r in ranges:
            state = self._states[r.topic_partition]
            state.position = r.until_offset
            state.last_batch = batch

    def record_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """``offsets`` (next offsets to read) were committed.

        A commit never moves ``committed`` back, and moves an ACTIVE partition's position
        past what the commit covered (a replayed batch after a restart).
        Caller: ``BatchCommitter``. Affects: ``committed`` (an owned partition not
        resumed yet becomes AWAITING_RESUME), ``position``.
        """
        for tp, until in offsets.items():
            state = self._states.get(tp)
            if state is None:
                state = self._states[tp] = PartitionState(Status.AWAITING_RESUME)
            state.committed = max(until, state.committed if state.committed is not None else until)
            if state.status is Status.ACTIVE and state.position is not None:
                state.position = max(state.position, until)

    def moved_to_end(self, tp: TopicPartition, end: int) -> None:
        """The log of ``tp`` now ends below its position (failOnDataLoss=false): continue
        from ``end``, and let commits go down to it.

        Caller: ``GroupStream`` after planning. Affects: an ACTIVE partition's ``position``
        and ``committed``; other states are left alone.
        """
        state = self._states.get(tp)
        if state is None or state.status is not Status.ACTIVE:
            return
        state.position = end
        state.committed = min(state.committed if state.committed is not None else end, end)

    def begin_revoke(self, partitions: Iterable[TopicPartition]) -> int:
        """Stop planning ``partitions``; return the batch the revocation must wait for (the
        last batch that read any of them; -1 for none).

        Caller: ``RevocationBarrier`` (owner thread). Affects: -> REVOKING.
        """
        wait_for = -1
        for tp in partitions:
            state = self._states.get(tp)
            if state is None:
                state = self._states[tp] = PartitionState(Status.REVOKING)
            state.status = Status.REVOKING
            state.position = None
            wait_for = max(wait_for, state.last_batch)
        return wait_for

    def released(self, partitions: Iterable[TopicPartition], through_batch: int) -> None:
        """This member released its claims on ``partitions`` (it is leaving, or a revocation
        timed out): they are never planned again here, and batches up to ``through_batch``
        may never commit them (the sink leaves them out of such batches now).

        Caller: ``Claims.release``. Affects: -> REVOKING, claim dropped.
        """
        for tp in partitions:
            state = self._states.get(tp)
            if state is not None:
                state.status = Status.REVOKING
                state.position = None
                state.claim = None
            self._gave_up_through[tp] = max(through_batch, self._gave_up_through.get(tp, -1))

    def give_up(self, partitions: Iterable[TopicPartition], through_batch: int) -> None:
        """``partitions`` are no longer this member's (lost, or revoked after the barrier):
        drop their state (with its handover and hold); batches up to ``through_batch`` may
        never commit them.

        Caller: ``RevocationBarrier`` (after the barrier) and ``GroupStream.on_lost``.
        Affects: the state is removed.
        """
        for tp in partitions:
            self._states.pop(tp, None)
            self._gave_up_through[tp] = max(through_batch, self._gave_up_through.get(tp, -1))
