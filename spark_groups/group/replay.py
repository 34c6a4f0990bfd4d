"""A batch Spark runs again after a restart: what this member reads of it.

Spark logs a batch's offsets in the query's checkpoint (``offsets/<id>``) before the batch
runs. A query that stops before the batch finishes (SIGTERM during a deploy, a crash, a
failed task) runs that batch again with the same offsets when it starts again: a *replay*.
The group did not wait meanwhile: the member left it when it stopped, so another consumer may
have owned some of the batch's partitions since, read them from the group's committed offset
(the batch's start) and committed past it. Read as logged, such a partition's records would be
processed twice: by that consumer and by the replay (the delta-group sink keeps its table
exact, but the records would be in the table *and* in the other consumer's output).

So the replay runs after the member has joined the group again and resolved where the group
stands (``group.arrivals``), and for each logged range ``[from, until)`` of a partition, with
``c`` the furthest committed offset known (ledger, Kafka, the sink's table):

====================================  ==========================================================
the partition                         this member reads
====================================  ==========================================================
not assigned to this member           nothing: its owner reads it from the group's offset
read under a claim token that is not  nothing: the sink's table leaves it out of the batch
this member's claim now (``sink.      (``spark_groups.sink.claim_tokens``); the partition is
table``)                              read from its position in the next batch
``c >= until``                        nothing: committed already (by this member before it
                                      stopped, or by another consumer)
``from < c < until``                  ``[c, until)``: another consumer processed ``[from, c)``
                                      (the range carries that consumer's handover)
otherwise                             ``[from, until)``, as logged
====================================  ==========================================================

What is read is registered as a batch planned here, so a revocation during the replay waits
at the barrier for it like for any batch. A sink that claims offsets by the batch's logged
plan (the delta-group sink records per partition that its table holds ``[from, until)``) must
not claim what was left out: the source writes a *replay notice* next to the offset log
(``spark_groups.storage.replays``) before the batch's tasks run, and the sink plans from it.
Without the query's checkpoint (the source option ``checkpointLocation``) there is nowhere to
write it: the batch is then read as logged (less the partitions whose claim moved on, which
the sink leaves out by itself), and the log says so. With it, every replay writes
its notice (also one read as logged), replacing what an earlier run of the batch left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from spark_groups.group.arrivals import Arrivals
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.member import GroupMember
from spark_groups.group.state import DriverState
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.offsets import BatchOffset, Handover, OffsetRange, TopicPartition
from spark_groups.secrets import scrub
from spark_groups.storage import replays

log = logging.getLogger(__name__)

#: Who processed ``[from, c)`` when the group's commit carries no name (metadata).
UNNAMED = "another consumer of the group"


@dataclass(frozen=True)
class ReplayDecision:
    """What a replay reads (``read``, the logged batch's number) and why the rest is left."""

    logged: BatchOffset
    read: BatchOffset
    #: Left out entirely, with why: ``"not assigned"`` or ``"committed to <c>"``.
    left_out: Mapping[TopicPartition, str]
    #: Read from a later offset than logged: the offset read from.
    trimmed: Mapping[TopicPartition, int]
    #: Left out because they were read under a claim that is no longer this member's.
    fenced: frozenset[TopicPartition] = frozenset()

    @property
    def changed(self) -> bool:
        """True when the replay reads less than the offset log and the claims say."""
        return bool(set(self.left_out) - self.fenced or self.trimmed)

    def as_logged(self) -> BatchOffset:
        """The logged batch less its fenced partitions (what a replay without a notice
        reads: the sink leaves the fenced ones out by itself)."""
        if not self.fenced:
            return self.logged
        return BatchOffset.of(
            self.logged.batch,
            [r for r in self.logged.ranges if r.topic_partition not in self.fenced],
            [h for h in self.logged.outside if h.topic_partition not in self.fenced],
            self.logged.claim_map(),
        )

    def describe(self) -> str:
        """One line for the log: what was left out or trimmed, and why."""
        parts = [f"{tp} left out ({why})" for tp, why in sorted(self.left_out.items())]
        parts += [f"{tp} read from {c}" for tp, c in sorted(self.trimmed.items())]
        return ", ".join(parts) or "read as logged"


def decide(
    logged: BatchOffset,
    assignment: frozenset[TopicPartition],
    committed: Mapping[TopicPartition, int],
    handover_into: Callable[[OffsetRange], Handover | None],
    claims: Mapping[TopicPartition, int] | None = None,
) -> ReplayDecision:
    """The table of the module doc for every range of ``logged``. ``committed``: the furthest
    known committed offset of each assigned partition; ``handover_into``: the handover a range
    starting at a given offset carries (``PartitionTable.handover_into``); ``claims``: this
    member's claim tokens now."""
    ranges: list[OffsetRange] = []
    outside = {h.topic_partition: h for h in logged.outside}
    left_out: dict[TopicPartition, str] = {}
    trimmed: dict[TopicPartition, int] = {}
    fenced: set[TopicPartition] = set()
    claims = claims or {}
    logged_claims = logged.claim_map()
    for r in logged.ranges:
        tp = r.topic_partition
        c = committed.get(tp)
        token = logged_claims.get(tp)
        if tp not in assignment:
            left_out[tp] = "not assigned"
            outside.pop(tp, None)
        elif token is not None and claims.get(tp) != token:
            left_out[tp] = "claimed anew since it was planned"
            fenced.add(tp)
            outside.pop(tp, None)
        elif c is not None and c >= r.until_offset:
            left_out[tp] = f"committed to {c}"
            outside.pop(tp, None)
        elif c is not None and c > r.from_offset:
            cut = OffsetRange(r.topic, r.partition, c, r.until_offset)
            ranges.append(cut)
            trimmed[tp] = c
            before = outside.get(tp)
            named = handover_into(cut)
            outside[tp] = Handover(
                r.topic,
                r.partition,
                # The table's gap starts where the logged range's own handover began, if any.
                before.since if before is not None else r.from_offset,
                c,
                named.by if named is not None else UNNAMED,
            )
        else:
            ranges.append(r)
    handovers = [h for tp, h in outside.items() if tp not in left_out]
    read = BatchOffset.of(logged.batch, ranges, handovers, claims)
    return ReplayDecision(logged, read, left_out, trimmed, frozenset(fenced))


class Replays:
    """Decides and registers what a replayed batch reads (see the module doc): the replay
    notice goes to ``checkpoint`` (the source option ``checkpointLocation``; none: read as
    logged) for the sink of ``group_id``. Owner thread only."""

    def __init__(
        self,
        checkpoint: str | None,
        group_id: str,
        storage_options: Mapping[str, str],
        state: DriverState,
        arrivals: Arrivals,
        durability: DurabilityWatch,
    ) -> None:
        self.checkpoint = checkpoint
        self.group_id = group_id
        self.storage_options = storage_options
        self.state = state
        self.arrivals = arrivals
        self.durability = durability

    def read(
        self, member: GroupMember, resolver: EndOffsetResolver, logged: BatchOffset
    ) -> BatchOffset:
        """What this member reads of ``logged``, which Spark replays; the member has its
        first assignment. Registered as planned here: the barrier waits for it, the safe
        point commits it."""
        partitions = self.state.partitions
        self.arrivals.resolve(member, resolver, logged)
        resolved = frozenset(partitions.plannable(member.assignment, held=False))
        decision = decide(
            logged,
            resolved,
            partitions.committed_offsets(),
            partitions.handover_into,
            partitions.claims(),
        )
        # The notice is written for every replay the checkpoint is known for, also one read
        # as logged: it replaces what an earlier run of this batch (which may have read less)
        # left there.
        read = decision.read if self._noted(decision) else decision.as_logged()
        self.durability.replayed(logged)  # its commit-log entry is found by what Spark logged
        partitions.planned(read.batch, [r for r in read.ranges if r.topic_partition in resolved])
        self.state.batches.add(read)
        what = decision.describe() if read is decision.read else "read as logged"
        if decision.fenced and read is not decision.read:
            what += f" (less {', '.join(sorted(str(tp) for tp in decision.fenced))}: claimed anew)"
        log.info("replaying batch %d: %s", logged.batch, what)
        return read

    def _noted(self, decision: ReplayDecision) -> bool:
        """Write the replay notice for the sink; False (read the batch as logged) when there
        is no checkpoint to write it to (warned when that reads more than this member's), or
        writing fails: records processed twice are better than a sink that claims offsets it
        never got."""
        checkpoint = self.checkpoint
        if checkpoint is None:
            if not decision.changed:
                return False
            log.warning(
                "batch %d is replayed after a restart and the group has moved on (%s); it is "
                "read as logged, so another consumer of the group may process some of its "
                "records too. Give the source the option checkpointLocation (the query's) so "
                "that a replay reads only what is still this member's",
                decision.logged.batch,
                decision.describe(),
            )
            return False
        notice = replays.ReplayNotice(decision.logged, decision.read)
        try:
            replays.write_notice(checkpoint, self.group_id, notice, self.storage_options)
        except Exception as exc:
            detail = scrub(f"{type(exc).__name__}: {exc}", self.storage_options)
            log.warning(
                "batch %d: could not write its replay notice (%s); reading it as logged",
                decision.logged.batch,
                detail,
            )
            return False
        return True
