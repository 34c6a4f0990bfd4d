"""Where a newly assigned partition resumes.

In order of precedence:

1. **committed**: the furthest of the ledger's last ``until`` (option ``offsets.table``) and
   the group's committed offset in Kafka, and of the exactly-once sink's table (option
   ``sink.table``) where that is further still;
2. **checkpoint**: with no commit anywhere, a partition the checkpoint's last batch read
   continues after that batch (as Spark's kafka source would);
3. **startingOffsets** at the query's first plan, and **earliest** for partitions that
   appear later (a topic grew, a pattern matched a new topic), as Spark's kafka source does.

The decision (:func:`choose`) is pure; the look-ups take the clients they need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from spark_groups.offsets import TopicPartition
from spark_groups.options import EARLIEST, LATEST, StartingOffsets

if TYPE_CHECKING:
    from spark_groups.group.member import GroupMember
    from spark_groups.kafka.watermarks import EndOffsetResolver
    from spark_groups.ledger import OffsetLedger

#: Where a partition's first position came from (as logged).
Origin = Literal["committed", "checkpoint", "startingOffsets", "earliest: a new partition"]


@dataclass(frozen=True)
class Start:
    """The first position of a partition and where it came from."""

    offset: int
    origin: Origin


def start_rule(starting: StartingOffsets, tp: TopicPartition, discovered_later: bool) -> int:
    """A real offset, or EARLIEST / LATEST: where ``tp`` starts without any commit."""
    if discovered_later:
        return starting.per_partition.get(tp, EARLIEST)
    return starting.for_partition(tp)


def committed_positions(
    partitions: Sequence[TopicPartition], ledger: OffsetLedger | None, member: GroupMember
) -> dict[TopicPartition, int]:
    """The furthest of the ledger's and Kafka's committed offset per partition; partitions
    committed in neither are left out."""
    known: dict[TopicPartition, int] = {}
    if ledger is not None:
        known.update(ledger.latest_positions(partitions))
    for tp, offset in member.committed(partitions).items():
        known[tp] = max(offset, known.get(tp, offset))
    return known


def sink_ahead(
    sink_path: str,
    group_id: str,
    partitions: Sequence[TopicPartition],
    known: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """The sink table's positions where they are ahead of ``known``."""
    from spark_groups.sink.commit import committed_positions as sink_positions

    sink = sink_positions(sink_path, group_id, partitions)
    return {tp: v for tp, v in sink.items() if v > known.get(tp, -1)}


def starting_offsets(
    rules: Mapping[TopicPartition, int], resolver: EndOffsetResolver
) -> dict[TopicPartition, int]:
    """Real offsets for ``rules`` (from :func:`start_rule`): EARLIEST and LATEST are looked
    up as the log start and end."""
    need_earliest = [tp for tp, v in rules.items() if v == EARLIEST]
    need_latest = [tp for tp, v in rules.items() if v == LATEST]
    earliest = resolver.start_offsets(need_earliest) if need_earliest else {}
    latest = resolver.end_offsets(need_latest) if need_latest else {}
    return {
        tp: earliest[tp] if v == EARLIEST else latest[tp] if v == LATEST else v
        for tp, v in rules.items()
    }


def choose(
    partitions: Iterable[TopicPartition],
    known: Mapping[TopicPartition, int],
    replayed: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    discovered_later: bool,
) -> dict[TopicPartition, Start]:
    """Where each of ``partitions`` resumes: committed (``known``), else after the
    checkpoint's last batch (``replayed``), else its start (``starts``)."""
    out: dict[TopicPartition, Start] = {}
    for tp in partitions:
        if tp in known:
            out[tp] = Start(known[tp], "committed")
        elif tp in replayed:
            out[tp] = Start(replayed[tp], "checkpoint")
        else:
            origin: Origin = "earliest: a new partition" if discovered_later else "startingOffsets"
            out[tp] = Start(starts[tp], origin)
    return out
