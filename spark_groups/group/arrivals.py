"""Newly assigned partitions: where each resumes, and what that implies before it is read.

At every plan, before ranges are planned, :meth:`Arrivals.resolve` handles the partitions the
group assigned since the last plan (``PartitionTable.begin_resume``):

1. Forget their cached log ends: a partition assigned anew may have a new log (a broker
   restarted, the topic was recreated), so a log that went backwards is seen.
2. Read where the group stands: the ledger's newest row and Kafka's committed offset (with
   its metadata: who committed), and with ``sink.table`` the sink's transaction versions,
   read in the commit that claims the partitions in the table (``group.claims``). Before the
   claim, a partition the group last committed from a query writing another delta-group
   table stops the query (``GroupTableMismatchError``: one group feeds one table).
3. Where the sink is ahead of both (it commits a batch before the source's safe point, so
   after a crash it can be one batch ahead), commit its position to Kafka and the ledger.
4. Name the ranges another consumer of the group committed past where spark_groups stood
   (handovers), and record them in the ledger once.
   In a pipeline flow that was fully refreshed, before its first batch, every one of them
   starts at ``startingOffsets`` instead, committed as a reset (``group.refresh``).
5. Choose each partition's first position (``group.resume.choose``): committed, else the
   checkpoint's last batch, else ``startingOffsets`` (``earliest`` for partitions that
   appear after the first plan). Positions resolved from ``latest`` are committed to Kafka
   at once, so the group agrees on them.
6. Give each its position and handover in its state; with ``sink.table``, hold the partitions
   the sink's table would get an unexplained gap in (``group.gaps``).

The group may revoke (or lose) the partitions while 2-5 run: their states, created when the
search began, go with the revocation, so step 6 leaves them out, and step 2's claim covers
only partitions still owned when it commits (``group.claims``).

Held partitions are checked again every ``gaps.RECHECK_S`` seconds
(:meth:`Arrivals.recheck_held`) and released once the sink's table reaches their position.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from spark_groups import crash_points
from spark_groups.errors import CommitError, GroupTableMismatchError
from spark_groups.group import gaps, refresh, resume
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.group.claims import Claims
from spark_groups.group.commit import BatchCommitter
from spark_groups.group.member import GroupMember
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
from spark_groups.offsets.starting import LATEST
from spark_groups.options import SourceOptions

log = logging.getLogger(__name__)


class Arrivals:
    """Resumes one stream's newly assigned partitions (see the module doc)."""

    def __init__(
        self,
        options: SourceOptions,
        books: Bookkeeping,
        committer: BatchCommitter,
        metrics: StreamMetrics,
        claims: Claims,
    ) -> None:
        self.options = options
        self.books = books
        self.committer = committer
        self.metrics = metrics
        self.claims = claims
        # Partitions assigned after the first plan with no committed offset anywhere are new
        # partitions (a topic grew, a pattern matched a new topic): they start at earliest.
        self._first_plan_done = False
        self._held_checked = 0.0

    def resolve(self, member: GroupMember, resolver: EndOffsetResolver, start: BatchOffset) -> None:
        """Steps 1-6 of the module doc, for the partitions that need a position."""
        books, options = self.books, self.options
        with books.lock:
            new = books.partitions.begin_resume(member.assignment)
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
                    options.group_id,
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
        if refresh.applies(options, start):  # a refreshed pipeline flow starts over
            reset = refresh.reset_positions(member, self.committer, resolver, new, known)
            known.update(reset)
            handovers = {tp: h for tp, h in handovers.items() if tp not in reset}
        self._record_handovers(handovers, committed.ledger)
        replayed = start.ends()
        discovered_later, self._first_plan_done = self._first_plan_done, True
        rules = {
            tp: resume.start_rule(options.starting_offsets, tp, discovered_later)
            for tp in new
            if tp not in known and tp not in replayed
        }
        starts = resume.starting_offsets(rules, resolver, options.starting_offsets) if rules else {}
        self._pin(member, {tp: v for tp, v in starts.items() if rules[tp] == LATEST})
        chosen = resume.choose(new, known, replayed, starts, discovered_later)
        sources: dict[str, dict[TopicPartition, int | None]] = {}
        resumed: dict[TopicPartition, int] = {}
        with books.lock:
            for tp, first in chosen.items():
                position = books.partitions.resume(
                    tp, first.offset, first.offset if first.origin == "committed" else None
                )
                sources.setdefault(first.origin, {})[tp] = position
                if position is not None:
                    resumed[tp] = position
                    if token is not None:
                        books.partitions.set_claim(tp, token)
                books.partitions.set_handover(tp, handovers.get(tp))
        log.info("resuming %d partitions: %s", len(new), _resumed_text(sources))
        if self.claims.enabled:
            who = {tp: commit_metadata.read(md).text for tp, (_, md) in committed.kafka.items()}
            self._hold(gaps.unexplained(resumed, sink, handovers, who))

    def recheck_held(self) -> None:
        """Every few seconds, release the held partitions the sink's table has reached (an
        operator ran ``spark-groups accept-gap``). Held partitions given up meanwhile went
        with their state."""
        with self.books.lock:
            held = self.books.partitions.held()
        if not held or time.monotonic() - self._held_checked < gaps.RECHECK_S:
            return
        self._held_checked = time.monotonic()
        assert self.claims.arbiter is not None
        table = self.claims.arbiter.holdings(held).positions
        done = list(gaps.released(held, table))
        with self.books.lock:
            self.books.partitions.release(done)
        self.count_held()
        for tp in done:
            log.info("%s: the sink table reaches %d now; reading it again", tp, table[tp])

    def count_held(self) -> None:
        """Bring the metric ``held_partitions`` up to date."""
        with self.books.lock:
            self.metrics.extra["held_partitions"] = len(self.books.partitions.held())

    def _hold(self, held: Mapping[TopicPartition, gaps.Held]) -> None:
        """Hold back partitions the sink's table would get an unexplained gap in."""
        if not held:
            return
        assert self.options.sink_path is not None
        with self.books.lock:
            self.books.partitions.hold(held)
        self.count_held()
        for h in held.values():
            log.error(
                "%s",
                h.message(self.options.group_id, self.options.sink_path, self.options.ledger_path),
            )

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
        if self.committer.ledger is not None and rows:
            self.committer.ledger.append(rows)

    def _catch_up_with_sink(
        self,
        member: GroupMember,
        sink: Mapping[TopicPartition, int],
        known: dict[TopicPartition, int],
    ) -> None:
        """Step 3: resume from the exactly-once sink (option ``sink.table``) where it is ahead
        of the ledger and Kafka, and bring both up to its position; without this the next
        owner would re-read that batch only for the sink to drop it."""
        ahead = {tp: v for tp, v in sink.items() if v > known.get(tp, -1)}
        if not ahead:
            return
        log.info("the sink %s is ahead; resuming from it: %s", self.options.sink_path, ahead)
        prior = dict(known)
        known.update(ahead)
        try:  # only partitions still owned: one revoked meanwhile is its next owner's to commit
            done = member.commit(
                ahead, owned_only=True, metadata=self.committer.metadata(member, "sink catch-up")
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
        self.committer.record_in_ledger(member, ranges, CATCH_UP_BATCH)

    def _pin(self, member: GroupMember, starts: Mapping[TopicPartition, int]) -> None:
        """Step 5's commit of where partitions that started at ``latest`` start (like a plain
        consumer's first commit after ``auto.offset.reset``), so the group agrees on it: a
        partition that moves before its first batch resumes there instead of resolving
        ``latest`` again later and skipping what arrived in between."""
        if not starts:
            return
        try:
            member.commit(
                starts, owned_only=True, metadata=self.committer.metadata(member, "starting offset")
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
