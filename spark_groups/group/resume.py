"""Where a newly assigned partition resumes: the pure decisions over the five records of
where a partition stands (Kafka with its commit metadata, the ledger, the sink's table,
Spark's checkpoint; the rebalance history is never read to resume). Their order of
precedence is stated once, in docs/architecture.md ("Where a partition stands: five
records, one order"): committed (the furthest of Kafka, the ledger and the table), else the
checkpoint's last batch, else ``startingOffsets`` (``earliest`` for partitions that appear
later).

:func:`choose` applies it; :func:`handovers` names the ranges another consumer of the group
committed past where spark_groups stood, so the exactly-once sink can tell them from loss;
:func:`other_table` finds a commit made for another delta-group table (one group feeds one
table). :func:`committed` and :func:`starting_offsets` are the look-ups, with the clients
they take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from spark_groups.errors import NoOffsetForTimestampError
from spark_groups.offsets import Handover, TopicPartition, commit_metadata
from spark_groups.offsets.starting import EARLIEST, LATEST, AtTimestamp, StartingOffsets, StartRule

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


def start_rule(starting: StartingOffsets, tp: TopicPartition, discovered_later: bool) -> StartRule:
    """A real offset, EARLIEST, LATEST or a timestamp: where ``tp`` starts without any
    commit. A partition that appeared while the query ran starts at EARLIEST unless a JSON
    option names it."""
    if discovered_later:
        return starting.per_partition.get(tp, EARLIEST)
    return starting.for_partition(tp)


@dataclass(frozen=True)
class Committed:
    """What is committed for some partitions: ``kafka`` (offset and metadata per partition),
    the ledger's positions (``ledger``: every row; ``ledger_own``: without offsets committed
    outside spark_groups)."""

    kafka: Mapping[TopicPartition, tuple[int, str]]
    ledger: Mapping[TopicPartition, int]
    ledger_own: Mapping[TopicPartition, int]

    def known(self) -> dict[TopicPartition, int]:
        """The furthest of the ledger's and Kafka's committed offset per partition;
        partitions committed in neither are left out."""
        return furthest(self.ledger, {tp: o for tp, (o, _) in self.kafka.items()})


def furthest(*positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The highest offset per partition over ``positions``."""
    out: dict[TopicPartition, int] = {}
    for each in positions:
        for tp, offset in each.items():
            out[tp] = max(offset, out.get(tp, offset))
    return out


def committed(
    partitions: Sequence[TopicPartition], ledger: OffsetLedger | None, member: GroupMember
) -> Committed:
    """Look up what Kafka (with commit metadata) and the ledger hold for ``partitions``."""
    kafka = member.committed_with_metadata(partitions)
    if ledger is None:
        return Committed(kafka, {}, {})
    return Committed(
        kafka,
        ledger.latest_positions(partitions),
        ledger.latest_positions(partitions, own_only=True),
    )


def handovers(
    kafka: Mapping[TopicPartition, tuple[int, str]], ours: Mapping[TopicPartition, int]
) -> dict[TopicPartition, Handover]:
    """The partitions whose Kafka commit (``kafka``: offset and metadata) another consumer
    of the group made, past where spark_groups itself stood (``ours``: the ledger's own rows
    and the sink's table; a partition missing there has no such position)."""
    out: dict[TopicPartition, Handover] = {}
    for tp, (offset, metadata) in sorted(kafka.items()):
        who = commit_metadata.read(metadata)
        since = ours.get(tp)
        if who.ours or (since is not None and offset <= since):
            continue
        out[tp] = Handover(tp.topic, tp.partition, since, offset, who.text)
    return out


def other_table(
    kafka: Mapping[TopicPartition, tuple[int, str]], table: str
) -> tuple[TopicPartition, commit_metadata.Committer] | None:
    """The first partition whose Kafka commit (``kafka``: offset and metadata) a query writing
    another delta-group table than ``table`` made, with who made it; None when there is none
    (commits without a table in their metadata are not counted: plain consumers, tools,
    queries without ``sink.table``)."""
    for tp, (_, metadata) in sorted(kafka.items()):
        who = commit_metadata.read(metadata)
        if who.sink is not None and who.sink.rstrip("/") != table.rstrip("/"):
            return tp, who
    return None


def starting_offsets(
    rules: Mapping[TopicPartition, StartRule],
    resolver: EndOffsetResolver,
    starting: StartingOffsets,
) -> dict[TopicPartition, int]:
    """Real offsets for ``rules`` (from :func:`start_rule`): EARLIEST and LATEST are looked
    up as the log start and end, a timestamp as the first record at or after it; where no
    record is that late, ``starting.timestamp_strategy`` decides (``latest``: the log end;
    ``error``: :class:`NoOffsetForTimestampError` naming the partition)."""
    by_time = {tp: v.ms for tp, v in rules.items() if isinstance(v, AtTimestamp)}
    found = resolver.offsets_for_times(by_time) if by_time else {}
    too_late = [tp for tp, offset in found.items() if offset is None]
    if too_late and starting.timestamp_strategy == "error":
        tp = sorted(too_late)[0]
        option = (
            "startingTimestamp"
            if isinstance(starting.default, AtTimestamp)
            else "startingOffsetsByTimestamp"
        )
        raise NoOffsetForTimestampError(tp, by_time[tp], option)
    need_earliest = [tp for tp, v in rules.items() if v == EARLIEST]
    need_latest = [tp for tp, v in rules.items() if v == LATEST] + too_late
    earliest = resolver.start_offsets(need_earliest) if need_earliest else {}
    latest = resolver.end_offsets(need_latest) if need_latest else {}
    out: dict[TopicPartition, int] = {}
    for tp, rule in rules.items():
        if isinstance(rule, AtTimestamp):
            offset = found[tp]
            out[tp] = latest[tp] if offset is None else offset
        elif rule == EARLIEST:
            out[tp] = earliest[tp]
        elif rule == LATEST:
            out[tp] = latest[tp]
        else:
            out[tp] = rule
    return out


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
