"""A pipeline flow that was fully refreshed reads its partitions again from ``startingOffsets``.

In Spark Declarative Pipelines a full refresh (``spark-pipelines run --full-refresh T``,
``--full-refresh-all``) truncates the streaming table ``T`` and gives its flows a new
checkpoint (``spark_groups.storage.flow_checkpoints``: the flow's checkpoint number goes up).
A new checkpoint alone would resume the group where it last committed, and the emptied table
would never get the records before that: a silent loss, not a refresh. So a ``kafka-group``
source with ``pipelines.flowCheckpoints`` whose flow checkpoint has a number above 0 and no
batch yet resets its group the way ``spark-groups reset`` does, for the partitions it owns:

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

from spark_groups.errors import CommitError
from spark_groups.group import resume
from spark_groups.group.commit import BatchCommitter
from spark_groups.group.member import GroupMember
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.offsets import BatchOffset, TopicPartition, positions_text
from spark_groups.options import SourceOptions

log = logging.getLogger(__name__)


def applies(options: SourceOptions, start: BatchOffset) -> bool:
    """Whether partitions resolved now start over (the module doc): a refreshed flow
    (checkpoint number above 0), no batch planned in its checkpoint yet, no ``sink.table``."""
    return options.flow_refresh > 0 and start.batch < 0 and options.sink_path is None


def reset_positions(
    member: GroupMember,
    committer: BatchCommitter,
    resolver: EndOffsetResolver,
    partitions: Sequence[TopicPartition],
    known: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Steps 1 and 2 for ``partitions`` (the group stood at ``known``): their positions at
    ``startingOffsets``, committed to Kafka and the ledger. Returns the positions (a
    partition revoked meanwhile is left to its next owner: not committed, not returned)."""
    options = committer.options
    rules = {tp: resume.start_rule(options.starting_offsets, tp, False) for tp in partitions}
    starts = resume.starting_offsets(rules, resolver, options.starting_offsets)
    what = f"full refresh {options.flow_refresh}"
    try:
        done = member.commit(starts, owned_only=True, metadata=committer.metadata(member, what))
    except CommitError as exc:
        raise CommitError(
            f"the flow's checkpoint {options.checkpoint} is a full refresh; committing its "
            f"partitions' starting offsets {positions_text(starts)} failed ({exc}); nothing "
            "was read: run the pipeline again",
            partitions=starts,
            code=exc.code,
        ) from exc
    reset = {tp: v for tp, v in starts.items() if tp in done}
    if committer.ledger is not None and reset:
        committer.ledger.record_reset(reset, known, member.member_id)
    log.warning(
        "group %s: the pipeline flow was fully refreshed (checkpoint %s): reading again from "
        "startingOffsets: %s (the group stood at %s)",
        options.group_id,
        options.checkpoint,
        positions_text(reset),
        positions_text({tp: v for tp, v in known.items() if tp in reset}) or "nothing",
    )
    return reset
