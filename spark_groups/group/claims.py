"""This member's claims on its partitions in the sink's table, and giving them back.

With the source option ``sink.table`` a member *claims* each partition it resumes in the
delta-group table (through its :class:`~spark_groups.group.arbiter.Arbiter`): the table then
writes that partition only from batches carrying the member's token, and a member that
*releases* its claims can commit the table's positions as final. Both run on the member's
owner thread, so a claim never lands after a revocation or a loss of its partitions began.
The steps and why they make a graceful stop exact: docs/architecture.md, "Claims".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_groups.errors import CommitError, SinkClaimError, StaleGenerationError
from spark_groups.group.arbiter import Arbiter
from spark_groups.group.committer import BatchCommitter
from spark_groups.group.member import GroupMember
from spark_groups.group.state import DriverState
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import OffsetRange, TopicPartition, positions_text

log = logging.getLogger(__name__)

#: How long a release keeps trying against concurrent commits before the member leaves
#: without committing the partitions (a stop never hangs on the table).
RELEASE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Released:
    """What a release settled (released, or found claimed by another owner), and
    ``retry_under`` when Kafka refused its positions for a generation a rebalance moved past
    (they wait in ``DriverState.releasing``: :meth:`Claims.commit_releasing`)."""

    settled: frozenset[TopicPartition] = frozenset()
    retry_under: int | None = None


class Claims:
    """The claims of one stream in the sink's table (``arbiter``); inert without one.
    Owner thread only."""

    def __init__(
        self,
        arbiter: Arbiter | None,
        state: DriverState,
        committer: BatchCommitter,
        metrics: StreamMetrics,
    ) -> None:
        self.arbiter = arbiter
        self.state = state
        self.committer = committer
        self.metrics = metrics
        self._late_tried = -2  # the last safe point's batch that tried a late claim

    @property
    def enabled(self) -> bool:
        """True with the source option ``sink.table``."""
        return self.arbiter is not None

    def claim(
        self, member: GroupMember, partitions: list[TopicPartition]
    ) -> tuple[int | None, dict[TopicPartition, int]]:
        """Claim those of ``partitions`` still owned under a fresh token; return the token
        (None: not claimed: none still owned, no table yet, or the claim failed) and the
        table's positions."""
        partitions = self.state.partitions.resuming(partitions)
        if not partitions or self.arbiter is None:
            return None, {}
        token = self.arbiter.new_token()
        try:
            claimed = self.arbiter.claim(partitions, token, member=member.member_id)
        except SinkClaimError as exc:
            log.warning("%s; reading them without a claim", exc)
            return None, self.arbiter.holdings(partitions).positions
        if claimed is None:
            return None, {}
        return token, claimed.positions

    def claim_late(self, member: GroupMember, committed_batch: int) -> None:
        """Claim the partitions resumed before the table existed: tried once after each
        batch committed (``committed_batch``): the batch that created the table is the last
        one planned without a claim."""
        if not self.enabled or committed_batch <= self._late_tried:
            return
        partitions = self.state.partitions
        unclaimed = partitions.unclaimed(member.assignment)
        if not unclaimed:
            return
        self._late_tried = committed_batch
        token, _ = self.claim(member, unclaimed)
        if token is not None:
            for tp in unclaimed:
                partitions.set_claim(tp, token)

    def release_all(self, member: GroupMember, *, may_retry: bool) -> Released:
        """Release every claimed partition as the member leaves (those being revoked too: a
        SIGTERM may arrive while a revocation waits at its barrier)."""
        return self.release(
            member, list(self.state.partitions.claimed()), "leaving the group", may_retry=may_retry
        )

    def release(
        self,
        member: GroupMember,
        partitions: Iterable[TopicPartition],
        why: str,
        *,
        may_retry: bool = False,
    ) -> Released:
        """Release the claimed ones of ``partitions`` and commit the table's positions of
        them to Kafka and the ledger, exactly (no batch planned until now may commit them)."""
        if self.arbiter is None:
            return Released()
        state = self.state
        tokens = {}
        for tp in partitions:
            found = state.partitions.get(tp)
            if found is not None and found.claim is not None:
                tokens[tp] = found.claim
        state.partitions.released(tokens, state.batches.highest)
        if not tokens:
            return Released()
        known = state.partitions.committed_offsets()
        try:
            released = self.arbiter.release(
                tokens, member=member.member_id, timeout_s=RELEASE_TIMEOUT_S
            )
        except SinkClaimError as exc:
            offsets = self._unfenced(tokens, known, why, exc)
            return Released(retry_under=self._commit(member, offsets, why, may_retry))
        if released is None:
            return Released()
        offsets = {tp: v for tp, v in released.positions.items() if v > known.get(tp, -1)}
        return Released(frozenset(tokens), self._commit(member, offsets, why, may_retry))

    def commit_releasing(self, member: GroupMember, *, may_retry: bool) -> int | None:
        """Commit the released positions Kafka refused for a moved-on generation, for the
        partitions still owned; return ``retry_under`` as :meth:`release` does."""
        offsets, self.state.releasing = self.state.releasing, {}
        owned = member.assignment
        return self._commit(
            member, {tp: v for tp, v in offsets.items() if tp in owned}, "leaving", may_retry
        )

    def take_releasing(self, member: GroupMember, partitions: Iterable[TopicPartition]) -> None:
        """A revocation of ``partitions`` begins while positions of theirs wait in
        ``DriverState.releasing``: commit them now, while they are still owned."""
        releasing = self.state.releasing
        offsets = {tp: releasing.pop(tp) for tp in partitions if tp in releasing}
        self._commit(member, offsets, "revoked while released", False)

    def _unfenced(
        self,
        tokens: dict[TopicPartition, int],
        known: Mapping[TopicPartition, int],
        why: str,
        failed: SinkClaimError,
    ) -> dict[TopicPartition, int]:
        """The release did not land in time: the positions the table holds now for the
        partitions still claimed under this member's tokens. Not final: a batch still in
        flight may land after this look and be read again by the next owner (at least once,
        never twice in the table)."""
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
            return {}
        offsets = {
            tp: v
            for tp, v in held.positions.items()
            if held.claims.get(tp) == tokens[tp] and v > known.get(tp, -1)
        }
        log.error(
            "%s; %s: committing the positions the table holds now (%s); a batch of them "
            "still in flight may land after this and be read again by their next owner",
            failed,
            why,
            positions_text(offsets) or "none past the group's commits",
        )
        return offsets

    def _commit(
        self, member: GroupMember, offsets: dict[TopicPartition, int], why: str, may_retry: bool
    ) -> int | None:
        """The released positions to Kafka, then the ledger; a refusal for a moved-on
        generation keeps them in ``DriverState.releasing`` and returns that generation when
        ``may_retry``."""
        if not offsets:
            log.info("%s: the sink's table holds nothing past the group's commits", why)
            return None
        partitions = self.state.partitions
        known = partitions.committed_offsets()
        try:
            metadata = self.committer.metadata.of(member, f"release ({why})")
            done = member.commit(offsets, owned_only=True, metadata=metadata)
        except StaleGenerationError as exc:
            if exc.transient and may_retry:
                self.state.releasing.update(offsets)
                return exc.generation
            self._failed(why, offsets, exc)
            return None
        except CommitError as exc:
            self._failed(why, offsets, exc)
            return None
        committed = {tp: v for tp, v in offsets.items() if tp in done}
        if not committed:
            return None
        ranges = [
            OffsetRange(tp.topic, tp.partition, known.get(tp, v), v)
            for tp, v in sorted(committed.items())
        ]
        partitions.record_commit(committed)
        last = max(self.state.batches.highest, 0)
        self.committer.append(self.committer.ledger_rows(member, ranges, last))
        log.info("%s: committed the sink table's positions %s", why, positions_text(committed))
        return None

    def _failed(self, why: str, offsets: Mapping[TopicPartition, int], exc: Exception) -> None:
        self.metrics.failed_commits += 1
        log.error(
            "%s: could not commit the sink table's positions %s to Kafka: %s",
            why,
            positions_text(offsets),
            exc,
        )
