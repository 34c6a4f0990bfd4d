"""Newly assigned partitions: where each resumes, and what that implies before it is read.

At every plan, before ranges are planned, :meth:`Arrivals.resolve` finds where the
partitions the group assigned since the last plan resume (``group.resume``): the ledger, Kafka
and with ``sink.table`` the sink's table, read in the commit that claims them there
(``group.claims``); it brings Kafka and the ledger up to the sink where the sink is ahead,
names the ranges other consumers of the group committed (handovers), starts a fully refreshed
pipeline flow over (``group.refresh``) and holds the partitions the sink's table would get an
unexplained gap in (``group.holds``). Owner thread only: no revocation runs while it does.
The steps in order: docs/architecture.md, "Where a partition resumes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from spark_groups import crash_points
from spark_groups.errors import CommitError, GroupTableMismatchError
from spark_groups.group import holds, refresh, resume
from spark_groups.group.claims import Claims
from spark_groups.group.committer import BatchCommitter
from spark_groups.group.member import GroupMember
from spark_groups.group.state import DriverState
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.ledger import CATCH_UP_BATCH, OUTSIDE_BATCH, LedgerRow
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import (
    BatchOffset,
    Handover,
    OffsetRange,
    TopicPartition,
    commit_metadata,
    partitions_text,
    positions_text,
)
from spark_groups.offsets.starting import LATEST, StartingOffsets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumeSettings:
    """The source options a resume reads: ``group.id``, ``startingOffsets``, the tables
    named in a held partition's message, and a pipeline flow's full refresh."""

    group_id: str
    starting_offsets: StartingOffsets
    sink_path: str | None = None
    ledger_path: str | None = None
    refresh: refresh.FlowRefresh | None = None


class Arrivals:
    """Resumes one stream's newly assigned partitions (see the module doc). Owner thread
    only."""

    def __init__(
        self,
        settings: ResumeSettings,
        state: DriverState,
        committer: BatchCommitter,
        metrics: StreamMetrics,
        claims: Claims,
    ) -> None:
        self.settings = settings
        self.state = state
        self.committer = committer
        self.metrics = metrics
        self.claims = claims
        # Partitions assigned after the first plan with no committed offset anywhere are new
        # partitions (a topic grew, a pattern matched a new topic): they start at earliest.
        self._first_plan_done = False
        self._held_checked = 0.0

    def resolve(self, member: GroupMember, resolver: EndOffsetResolver, start: BatchOffset) -> None:
        """Give every newly assigned partition its first position (the module doc)."""
        settings, partitions = self.settings, self.state.partitions
        new = partitions.begin_resume(member.assignment)
        if not new:
            return
        crash_points.reached("resuming")
        resolver.forget(new)
        committed = resume.committed(new, self.committer.ledger, member)
        if self.claims.arbiter is not None:  # one group feeds one table
            other = resume.other_table(committed.kafka, self.claims.arbiter.path)
            if other is not None:
                tp, committer = other
                raise GroupTableMismatchError(
                    settings.group_id,
                    tp,
                    self.claims.arbiter.path,
                    str(committer.sink),
                    committer.text,
                )
        known = committed.known()
        sink: dict[TopicPartition, int] = {}
        token: int | None = None
        if self.claims.enabled:
            token, sink = self.claims.claim(member, new)
            self._catch_up_with_sink(member, sink, known)
        handovers = resume.handovers(committed.kafka, resume.furthest(committed.ledger_own, sink))
        flow = settings.refresh
        if flow is not None and flow.starts_over(start):  # a refreshed flow starts over
            reset = flow.reset_positions(
                member, self.committer, resolver, new, known, settings.starting_offsets
            )
            known.update(reset)
            handovers = {tp: h for tp, h in handovers.items() if tp not in reset}
        self._record_handovers(handovers, committed.ledger)
        replayed = start.ends()
        discovered_later, self._first_plan_done = self._first_plan_done, True
        rules = {
            tp: resume.start_rule(settings.starting_offsets, tp, discovered_later)
            for tp in new
            if tp not in known and tp not in replayed
        }
        starts = (
            resume.starting_offsets(rules, resolver, settings.starting_offsets) if rules else {}
        )
        self._pin(member, {tp: v for tp, v in starts.items() if rules[tp] == LATEST})
        chosen = resume.choose(new, known, replayed, starts, discovered_later)
        sources: dict[str, dict[TopicPartition, int | None]] = {}
        resumed: dict[TopicPartition, int] = {}
        for tp, first in chosen.items():
            position = partitions.resume(
                tp, first.offset, first.offset if first.origin == "committed" else None
            )
            sources.setdefault(first.origin, {})[tp] = position
            if position is not None:
                resumed[tp] = position
                if token is not None:
                    partitions.set_claim(tp, token)
            partitions.set_handover(tp, handovers.get(tp))
        log.info("resuming %d partitions: %s", len(new), _resumed_text(sources))
        if self.claims.enabled:
            who = {tp: commit_metadata.read(md).text for tp, (_, md) in committed.kafka.items()}
            self._hold(holds.unexplained(resumed, sink, handovers, who))

    def recheck_held(self) -> None:
        """Every few seconds, release the held partitions the sink's table has reached (an
        operator ran ``spark-groups accept-gap``). Held partitions given up meanwhile went
        with their state."""
        held = self.state.partitions.held()
        if not held or time.monotonic() - self._held_checked < holds.RECHECK_S:
            return
        self._held_checked = time.monotonic()
        assert self.claims.arbiter is not None
        table = self.claims.arbiter.holdings(held).positions
        done = list(holds.released(held, table))
        self.state.partitions.release(done)
        self.count_held()
        for tp in done:
            log.info("%s: the sink table reaches %d now; reading it again", tp, table[tp])

    def count_held(self) -> None:
        """Bring the metric ``held_partitions`` up to date."""
        self.metrics.extra["held_partitions"] = len(self.state.partitions.held())

    def _hold(self, held: Mapping[TopicPartition, holds.Held]) -> None:
        """Hold back partitions the sink's table would get an unexplained gap in."""
        if not held:
            return
        settings = self.settings
        assert settings.sink_path is not None
        self.state.partitions.hold(held)
        self.count_held()
        for h in held.values():
            log.error("%s", h.message(settings.group_id, settings.sink_path, settings.ledger_path))

    def _record_handovers(
        self, handovers: Mapping[TopicPartition, Handover], ledger: Mapping[TopicPartition, int]
    ) -> None:
        """Log the ranges other consumers of the group committed and record them in the
        ledger (``batch`` :data:`OUTSIDE_BATCH`), once: a range the ledger already reaches
        was recorded by an earlier owner."""
        for h in handovers.values():
            log.info(
                "%s resumes at %d, committed by %s (spark_groups stood at %s): the range was "
                "processed outside this query",
                h.topic_partition,
                h.until,
                h.by,
                h.since,
            )
        rows = [
            LedgerRow(
                topic=h.topic,
                partition=h.partition,
                from_offset=h.until if h.since is None else h.since,
                until_offset=h.until,
                member_id=h.by,
                generation=-1,
                batch=OUTSIDE_BATCH,
                committed_at=datetime.now(UTC),
            )
            for tp, h in sorted(handovers.items())
            if ledger.get(tp, -1) < h.until
        ]
        self.committer.append(rows)

    def _catch_up_with_sink(
        self,
        member: GroupMember,
        sink: Mapping[TopicPartition, int],
        known: dict[TopicPartition, int],
    ) -> None:
        """Resume from the exactly-once sink (option ``sink.table``) where it is ahead of the
        ledger and Kafka, and bring both up to its position; without this the next owner
        would re-read that batch only for the sink to drop it."""
        ahead = {tp: v for tp, v in sink.items() if v > known.get(tp, -1)}
        if not ahead:
            return
        log.info("the sink %s is ahead; resuming from it: %s", self.settings.sink_path, ahead)
        prior = dict(known)
        known.update(ahead)
        try:  # only partitions still owned: one revoked meanwhile is its next owner's to commit
            done = member.commit(
                ahead, owned_only=True, metadata=self.committer.metadata.of(member, "sink catch-up")
            )
        except CommitError as exc:  # includes a stale generation: the next owner does this
            self.metrics.failed_commits += 1
            log.warning("could not bring Kafka up to the sink's offsets: %s", exc)
            return
        ranges = [
            OffsetRange(tp.topic, tp.partition, prior.get(tp, until), until)
            for tp, until in sorted(ahead.items())
            if tp in done
        ]
        self.committer.append(self.committer.ledger_rows(member, ranges, CATCH_UP_BATCH))

    def _pin(self, member: GroupMember, starts: Mapping[TopicPartition, int]) -> None:
        """Commit where partitions that started at ``latest`` start (like a plain consumer's
        first commit after ``auto.offset.reset``): a partition that moves before its first
        batch resumes there instead of resolving ``latest`` again later, skipping what
        arrived in between."""
        if not starts:
            return
        try:
            member.commit(
                starts,
                owned_only=True,
                metadata=self.committer.metadata.of(member, "starting offset"),
            )
        except CommitError as exc:
            log.warning("could not commit the starting offsets %s: %s", dict(starts), exc)


def _resumed_text(sources: dict[str, dict[TopicPartition, int | None]]) -> str:
    """Where resumed partitions start, by origin: each partition's offset for a few, the
    partitions alone for many (a line stays short at a thousand partitions)."""
    parts = []
    for origin, positions in sorted(sources.items()):
        known = {tp: p for tp, p in positions.items() if p is not None}
        if len(positions) <= 20 and known:
            where = positions_text(known)
            unknown = [tp for tp, p in positions.items() if p is None]
            if unknown:
                where += f" ({partitions_text(unknown)} being revoked)"
        else:
            where = partitions_text(positions)
        parts.append(f"{where} from {origin}")
    return "; ".join(parts)
