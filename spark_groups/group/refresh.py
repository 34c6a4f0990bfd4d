"""A pipeline flow that was fully refreshed reads its partitions again from ``startingOffsets``.

In Spark Declarative Pipelines a full refresh (``spark-pipelines run --full-refresh T``,
``--full-refresh-all``) truncates the streaming table ``T`` and gives its flows a new
checkpoint (``spark_groups.storage.flow_checkpoints``: the flow's checkpoint number goes up).
A new checkpoint alone would resume the group where it last committed, and the emptied table
would never get the records before that: a silent loss, not a refresh. So a ``kafka-group``
source with ``pipelines.flowCheckpoints`` whose flow checkpoint has a number above 0 and no
batch yet resets its group the way ``spark-groups reset`` does, for the partitions it owns
(``group.arrivals`` asks :class:`FlowRefresh` for the partitions it resolves):

1. Every partition assigned before the refreshed flow's first batch is planned starts at
   ``startingOffsets``, whatever the group committed before (:func:`reset_positions`).
2. That position is committed to Kafka (only partitions still owned, metadata ``full
   refresh N``) and recorded in the ledger as a reset marker, before any batch reads it: a
   run stopped before its first batch commits, and run again, finds the group there.
3. From the first batch on the flow is an ordinary query: partitions assigned later resume
   where the group committed them (their records were read by another member).

A source with ``sink.table`` is never reset: a pipeline sink is not refreshed (its table
keeps what it holds), and the table's positions decide where its partitions resume, so
nothing is written twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spark_groups.errors import CommitError
from spark_groups.group import resume
from spark_groups.group.committer import BatchCommitter
from spark_groups.group.member import GroupMember
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.offsets import BatchOffset, TopicPartition, positions_text
from spark_groups.offsets.starting import StartingOffsets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowRefresh:
    """A pipeline flow's full refresh: the flow checkpoint's ``number`` (above 0) and path,
    for the source of ``group_id`` (one without ``sink.table``: :func:`of`)."""

    number: int
    checkpoint: str | None
    group_id: str

    def starts_over(self, start: BatchOffset) -> bool:
        """Whether partitions resolved at ``start`` start over: no batch planned yet."""
        return start.batch < 0

    def reset_positions(
        self,
        member: GroupMember,
        committer: BatchCommitter,
        resolver: EndOffsetResolver,
        partitions: Sequence[TopicPartition],
        known: Mapping[TopicPartition, int],
        starting: StartingOffsets,
    ) -> dict[TopicPartition, int]:
        """Steps 1 and 2 for ``partitions`` (the group stood at ``known``): their positions
        at ``startingOffsets``, committed to Kafka and the ledger. Returns the positions (a
        partition revoked meanwhile is left to its next owner: not committed, not
        returned)."""
        rules = {tp: resume.start_rule(starting, tp, False) for tp in partitions}
        starts = resume.starting_offsets(rules, resolver, starting)
        what = f"full refresh {self.number}"
        try:
            metadata = committer.metadata.of(member, what)
            done = member.commit(starts, owned_only=True, metadata=metadata)
        except CommitError as exc:
            raise CommitError(
                f"the flow's checkpoint {self.checkpoint} is a full refresh; committing its "
                f"partitions' starting offsets {positions_text(starts)} failed ({exc}); "
                "nothing was read: run the pipeline again",
                partitions=starts,
                code=exc.code,
            ) from exc
        reset = {tp: v for tp, v in starts.items() if tp in done}
        if committer.ledger is not None and reset:
            committer.ledger.record_reset(reset, known, member.member_id)
        log.warning(
            "group %s: the pipeline flow was fully refreshed (checkpoint %s): reading again "
            "from startingOffsets: %s (the group stood at %s)",
            self.group_id,
            self.checkpoint,
            positions_text(reset),
            positions_text({tp: v for tp, v in known.items() if tp in reset}) or "nothing",
        )
        return reset


def of(
    flow_refresh: int, checkpoint: str | None, group_id: str, sink_path: str | None
) -> FlowRefresh | None:
    """The full refresh a source's first batch starts over from (the module doc): a
    refreshed flow (checkpoint number above 0) and no ``sink.table``; None otherwise."""
    if flow_refresh <= 0 or sink_path is not None:
        return None
    return FlowRefresh(flow_refresh, checkpoint, group_id)
