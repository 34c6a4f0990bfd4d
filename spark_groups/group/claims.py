"""This member's claims on its partitions in the sink's table, and giving them back.

With the source option ``sink.table`` (the ``delta-group`` sink's table, asked through its
:class:`~spark_groups.group.arbiter.Arbiter`) a member *claims* each partition it resumes in
the table: the table then writes
that partition only from batches carrying the member's token. That is what makes a graceful
stop exact by construction instead of by timing:

1. **Claim** (``group.arrivals``, at resume): one Delta commit sets the new partitions'
   claims to a fresh token and reads their positions in the same snapshot. A table that does
   not exist yet is claimed later, once a batch has created it (:meth:`Claims.claim_late`).
   A claim covers only partitions still owned, checked under :attr:`Claims.lock`, which a
   revocation and a loss take before they begin (:meth:`Claims.settled`): a claim never
   lands after this member gave a partition up, so it can never overwrite the claim of the
   partition's next owner (who is assigned it only after this member's revocation ended).
2. **Release** (:meth:`Claims.release`, when the member leaves the group, or a revocation's
   barrier timed out): under the committer's lock, so no safe-point commit runs beside it,

   a. the partitions stop being planned, and no batch planned until now may commit them to
      Kafka any more (``PartitionTable.released``);
   b. one Delta commit sets their claims to ``RELEASED``, compare-and-set on this member's
      tokens. A batch of them still in flight in the sink now cannot land them: its commit
      conflicts, or its decision sees the claim moved on, and leaves them out;
   c. the positions read in that commit's snapshot are therefore final: they are committed
      to Kafka (and the ledger) exactly, where they are past what is known committed.

   A partition whose claim is no longer this member's was claimed by its next owner
   already (this member was fenced): nothing of it is committed. The release is bounded
   (:data:`RELEASE_TIMEOUT_S`); when it does not land in time the member commits the
   positions one snapshot of the table holds then (:meth:`Claims._commit_unfenced`): a batch
   still in flight may land after that look and be read again by the next owner (at least
   once, never twice in the table: the sink's per-partition positions still hold).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from spark_groups.errors import CommitError, SinkClaimError, StaleGenerationError
from spark_groups.group.arbiter import Arbiter
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.group.commit import BatchCommitter
from spark_groups.group.member import GroupMember
from spark_groups.group.releases import ReleasesInFlight
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import OffsetRange, TopicPartition, positions_text

log = logging.getLogger(__name__)

#: How long a release keeps trying against concurrent commits before the member leaves
#: without committing the partitions (a stop never hangs on the table).
RELEASE_TIMEOUT_S = 10.0


class Claims:
    """The claims of one stream (see the module doc) in the sink's table (``arbiter``); inert
    without one (no ``sink.table``)."""

    def __init__(
        self,
        arbiter: Arbiter | None,
        books: Bookkeeping,
        committer: BatchCommitter,
        metrics: StreamMetrics,
    ) -> None:
        self.arbiter = arbiter
        self.books = books
        self.committer = committer
        self.metrics = metrics
        self._late_tried = -2  # the last safe point's batch that tried a late claim
        #: Held by a claim from its ownership check to its Delta commit, and by a revocation
        #: or a loss while it begins (:meth:`settled`): the two never interleave.
        self.lock = threading.Lock()
        #: The released partitions whose positions are on their way to Kafka (step 2c):
        #: a revocation of them that runs inside that commit commits them in its place.
        self.in_flight = ReleasesInFlight()

    @property
    def enabled(self) -> bool:
        """True with the source option ``sink.table``."""
        return self.arbiter is not None

    @contextlib.contextmanager
    def settled(self, serve: Callable[[float], None] | None = None) -> Iterator[None]:
        """No claim is in flight inside the block (a revocation or a loss begins in it).
        With ``serve`` (the member's owner thread, which must keep serving) the lock is
        waited for without blocking that thread; a claim holds it for one Delta commit."""
        if serve is None:
            self.lock.acquire()
        else:
            while not self.lock.acquire(blocking=False):
                serve(0.05)
        try:
            yield
        finally:
            self.lock.release()

    def claim(
        self, member: GroupMember, partitions: list[TopicPartition]
    ) -> tuple[int | None, dict[TopicPartition, int]]:
        """Step 1: claim those of ``partitions`` still owned under a fresh token; return the
        token (None: not claimed: none still owned, no table yet, or the claim failed) and
        the table's positions."""
        with self.lock:
            with self.books.lock:
                partitions = self.books.partitions.resuming(partitions)
            if not partitions:
                return None, {}
            return self._claim(member, partitions)

    def _claim(
        self, member: GroupMember, partitions: list[TopicPartition]
    ) -> tuple[int | None, dict[TopicPartition, int]]:
        assert self.arbiter is not None
        token = self.arbiter.new_token()
        try:
            claimed = self.arbiter.claim(partitions, token, member=member.member_id)
        except SinkClaimError as exc:
            log.warning("%s; reading them without a claim", exc)
            return None, self._positions(partitions)
        if claimed is None:
            return None, {}
        return token, claimed.positions

    def claim_late(self, member: GroupMember, committed_batch: int) -> None:
        """Step 1 for partitions resumed before the table existed: tried once after each
        batch committed (``committed_batch``, the safe point's): the batch that created the
        table is the last one planned without a claim."""
        if not self.enabled or committed_batch <= self._late_tried:
            return
        with self.books.lock:
            unclaimed = self.books.partitions.unclaimed(member.assignment)
        if not unclaimed:
            return
        self._late_tried = committed_batch
        token, _ = self.claim(member, unclaimed)
        if token is None:
            return
        with self.books.lock:
            for tp in unclaimed:
                self.books.partitions.set_claim(tp, token)

    def release_all(self, member: GroupMember) -> set[TopicPartition]:
        """Step 2 for every claimed partition, as the member leaves the group (those being
        revoked too: a SIGTERM may arrive while a revocation waits at its barrier): what
        :meth:`release` settled. Takes the committer's lock (no safe point runs beside it)."""
        with self.committer.lock:
            with self.books.lock:
                claimed = list(self.books.partitions.claimed())
            return self.release(member, claimed, "leaving the group")

    def release(
        self, member: GroupMember, partitions: Iterable[TopicPartition], why: str
    ) -> set[TopicPartition]:
        """Step 2 for the claimed ones of ``partitions``; return those it settled (released,
        or found claimed by another owner). The caller holds the committer's lock."""
        if not self.enabled:
            return set()
        books = self.books
        with books.lock:
            tokens = {}
            for tp in partitions:
                state = books.partitions.get(tp)
                if state is not None and state.claim is not None:
                    tokens[tp] = state.claim
            books.partitions.released(tokens, books.batches.highest)  # 2a
            known = books.partitions.committed_offsets()
            self.in_flight.begin(tokens)
        if not tokens:
            return set()
        assert self.arbiter is not None
        try:
            try:
                released = self.arbiter.release(  # 2b
                    tokens, member=member.member_id, timeout_s=RELEASE_TIMEOUT_S
                )
            except SinkClaimError as exc:
                self._commit_unfenced(member, tokens, known, why, exc)
                return set()
            if released is None:
                return set()
            offsets = {tp: v for tp, v in released.positions.items() if v > known.get(tp, -1)}
            self.in_flight.landed(tokens, offsets)
            self._commit(member, offsets, known, why)  # 2c
            return set(tokens)
        finally:
            self.in_flight.end(tokens)

    def commit_in_place(self, member: GroupMember, partitions: Iterable[TopicPartition]) -> None:
        """Owner thread, in a revocation of ``partitions`` that runs inside this member's
        release commit (step 2c; the releasing thread waits for this one): commit the
        release's positions of them now, while they are still owned
        (``group.releases``)."""
        offsets = self.in_flight.take(partitions)
        if not offsets:
            return
        with self.books.lock:
            known = self.books.partitions.committed_offsets()
        self._commit(member, offsets, known, "revoked while released")

    def _commit_unfenced(
        self,
        member: GroupMember,
        tokens: dict[TopicPartition, int],
        known: dict[TopicPartition, int],
        why: str,
        failed: SinkClaimError,
    ) -> None:
        """Step 2c without 2b (the release did not land in time): commit the positions the
        table holds now for the partitions still claimed under this member's tokens. Not
        final: a batch of this member still in flight may land after this look, and its
        records are then read again by the next owner (at least once; never lost, never
        twice in the table). Committing nothing instead would leave every batch since the
        group's last commit to be read again, although the table holds it (found in the
        rolling benchmark: a release that met the member's own last batch committing on a
        saturated machine ran out of time after that batch had landed)."""
        assert self.arbiter is not None
        try:
            held = self.arbiter.holdings(tokens)
        except Exception as exc:  # the table cannot be read either
            log.error(
                "%s; %s, and the table cannot be read (%s: %s): nothing committed for them, "
                "their next owner reads from the group's last commit",
                failed,
                why,
                type(exc).__name__,
                exc,
            )
            return
        offsets = {
            tp: v
            for tp, v in held.positions.items()
            if held.claims.get(tp) == tokens[tp] and v > known.get(tp, -1)
        }
        self.in_flight.landed(tokens, offsets)
        log.error(
            "%s; %s: committing the positions the table holds now (%s); a batch of them "
            "still in flight may land after this and be read again by their next owner",
            failed,
            why,
            positions_text(offsets) or "none past the group's commits",
        )
        self._commit(member, offsets, known, why)

    def _commit(
        self,
        member: GroupMember,
        offsets: dict[TopicPartition, int],
        known: dict[TopicPartition, int],
        why: str,
    ) -> None:
        """Step 2c: the released positions to Kafka, then the ledger. A commit refused
        because a rebalance moved on is made again under the new generation (not on the
        owner thread, where the generation cannot move meanwhile)."""
        if not offsets:
            log.info("%s: the sink's table holds nothing past the group's commits", why)
            return
        deadline = time.monotonic() + RELEASE_TIMEOUT_S
        try:
            while True:
                try:
                    done = member.commit(
                        offsets,
                        owned_only=True,
                        metadata=self.committer.metadata(member, f"release ({why})"),
                    )
                    break
                except StaleGenerationError as exc:  # a rebalance moved on: once more under
                    if not (  # the new generation, for the partitions still owned
                        exc.transient
                        and self.committer.await_new_generation(member, exc.generation, deadline)
                    ):
                        raise
        except CommitError as exc:
            self.metrics.failed_commits += 1
            log.error(
                "%s: could not commit the sink table's positions %s to Kafka: %s",
                why,
                positions_text(offsets),
                exc,
            )
            return
        # A revocation that ran inside this commit committed its partitions itself
        # (commit_in_place): they are no longer owned, and left out here.
        committed = {tp: v for tp, v in offsets.items() if tp in done}
        if not committed:
            return
        ranges = [
            OffsetRange(tp.topic, tp.partition, known.get(tp, v), v)
            for tp, v in sorted(committed.items())
        ]
        with self.books.lock:
            self.books.partitions.record_commit(committed)
            last = self.books.batches.highest
        self.committer.record_in_ledger(member, ranges, max(last, 0))
        log.info("%s: committed the sink table's positions %s", why, positions_text(committed))

    def _positions(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The table's positions without a claim (the claim failed)."""
        assert self.arbiter is not None
        return self.arbiter.holdings(partitions).positions
