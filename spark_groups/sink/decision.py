"""What the sink writes of a batch, decided from the batch's plan and the table's versions.

No table, no clock: :class:`~spark_groups.sink.group_commit.DeltaSink` reads one snapshot's
transaction versions and claims and asks :func:`decide_batch`, which cuts files through the
caller's function and answers with the :class:`BatchDecision` to commit, or refuses a gap.
:func:`decide` is the pure rule per partition, with ``v`` the table's next offset and
``[from, until)`` the planned range: ``fenced`` when the batch's claim token is no longer the
table's claim; else ``drop`` when ``v >= until``; ``write`` from ``from`` (no ``v``, ``v ==
from``, or ``v < from`` explained by the plan's handover, recorded as outside), from ``v``
when ``from < v < until``; and ``gap`` for an unexplained ``v < from`` (``SinkGapError``
unless ``failOnGap=false``). docs/sink.md, "Fencing: what happens to each partition of a
batch".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from spark_groups.errors import SinkGapError
from spark_groups.offsets import Handover, OffsetRange, TopicPartition
from spark_groups.sink.plan import BatchPlan

if TYPE_CHECKING:
    from spark_groups.sink.writer import DataFile

log = logging.getLogger(__name__)

Action = Literal["drop", "write", "gap", "fenced"]
#: A partition the batch would leave a gap in: the table's version and the planned range.
Gap = tuple[TopicPartition, int, OffsetRange]
#: Cuts one file to the rows kept: per Kafka partition written, those from its start offset
#: (partitions not given are left out); None when nothing is left.
Cut = Callable[["DataFile", dict[TopicPartition, int]], "DataFile | None"]


@dataclass(frozen=True)
class PartitionDecision:
    """What happens to one partition's range: ``action``, the first offset written
    (``start``), the table's version it was decided against (``version``), and for a range
    after another consumer's commits, ``outside = (v, from, who)``."""

    action: Action
    start: int
    version: int | None
    outside: tuple[int, int, str] | None = None


def decide(
    plan: BatchPlan,
    versions: Mapping[TopicPartition, int],
    claims: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, PartitionDecision]:
    """The decision for every partition of ``plan`` against the table's ``versions`` and
    ``claims``."""
    out: dict[TopicPartition, PartitionDecision] = {}
    claims = claims or {}
    for tp in sorted(plan.ranges):
        planned = plan.ranges[tp]
        version = versions.get(tp)
        token, held = plan.claims.get(tp), claims.get(tp)
        if token is not None and held is not None and held != token:
            out[tp] = PartitionDecision("fenced", planned.from_offset, version)
        elif version is not None and version >= planned.until_offset:
            out[tp] = PartitionDecision("drop", planned.until_offset, version)
        elif version is None or version == planned.from_offset:
            out[tp] = PartitionDecision("write", planned.from_offset, version)
        elif version > planned.from_offset:
            out[tp] = PartitionDecision("write", version, version)
        else:
            handover = plan.outside.get(tp)
            if handover is not None and handover.explains(version, planned.from_offset):
                outside = (version, planned.from_offset, handover.by)
                out[tp] = PartitionDecision("write", planned.from_offset, version, outside)
            else:
                out[tp] = PartitionDecision("gap", planned.from_offset, version)
    return out


@dataclass
class BatchDecision:
    """A batch decided against one snapshot of the table.

    ``keep`` are the files to commit, ``txns`` the transaction version to set per partition
    written, ``claims`` the claim token to set again per partition written under one,
    ``written`` the range whose rows go in per partition, ``dropped`` the partitions whose
    rows are all in the table already, ``fenced`` those whose claim moved on,
    ``versions`` the snapshot's transaction versions, and ``outside`` the gaps another
    consumer of the group accounts for: ``[v, from)`` and who.
    """

    keep: list[DataFile] = field(default_factory=list)
    txns: dict[TopicPartition, int] = field(default_factory=dict)
    claims: dict[TopicPartition, int] = field(default_factory=dict)
    written: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    dropped: list[TopicPartition] = field(default_factory=list)
    fenced: list[TopicPartition] = field(default_factory=list)
    versions: dict[TopicPartition, int] = field(default_factory=dict)
    outside: dict[TopicPartition, tuple[int, int, str]] = field(default_factory=dict)


def decide_batch(
    plan: BatchPlan,
    versions: dict[TopicPartition, int],
    files: Sequence[DataFile],
    cut: Cut,
    *,
    table_path: str,
    group_id: str,
    fail_on_gap: bool,
    claims: Mapping[TopicPartition, int] | None = None,
) -> BatchDecision:
    """Decide ``plan`` and its ``files`` against the table's ``versions`` and ``claims``
    (one snapshot).

    Partitions in the table already are dropped; a file holding rows the commit leaves out
    (of a dropped or fenced partition, or below the table's offset) is cut with ``cut``, a
    file with none of them kept as it is; a gap raises
    :class:`~spark_groups.errors.SinkGapError` (its partitions and missing offsets in
    ``gaps``), or with ``fail_on_gap`` false is logged and written. ``table_path`` and
    ``group_id`` are for the messages.
    """
    decision = BatchDecision()
    decision.versions = versions
    gaps: list[Gap] = []
    for tp, choice in decide(plan, versions, claims).items():
        planned = plan.ranges[tp]
        if choice.action == "drop":
            decision.dropped.append(tp)
            continue
        if choice.action == "fenced":
            decision.fenced.append(tp)
            continue
        if choice.action == "gap":  # refused below unless failOnGap=false writes it
            assert choice.version is not None  # a gap is always below a known version
            gaps.append((tp, choice.version, planned))
        if choice.outside is not None:
            decision.outside[tp] = choice.outside
        decision.txns[tp] = planned.until_offset
        if tp in plan.claims:
            decision.claims[tp] = plan.claims[tp]
        decision.written[tp] = OffsetRange(
            tp.topic, tp.partition, choice.start, planned.until_offset
        )
    decision.keep = kept_files(files, decision.written, cut)
    if decision.fenced:
        log.info(
            "sink %s: batch %d: %s claimed anew or given up since the batch was planned; "
            "left out (their next owner reads them from the table's position)",
            table_path,
            plan.batch_id,
            ", ".join(str(tp) for tp in decision.fenced),
        )
    for tp, (v, until, by) in decision.outside.items():
        log.info(
            "sink %s: batch %d: %s [%d, %d) was committed by %s, outside this table; "
            "recorded as such",
            table_path,
            plan.batch_id,
            tp,
            v,
            until,
            by,
        )
    if gaps:
        if fail_on_gap:
            raise gap_error(plan, gaps, table_path, group_id)
        log.warning(
            "sink %s: batch %d leaves a gap (failOnGap=false): %s",
            table_path,
            plan.batch_id,
            gap_text(plan, gaps),
        )
    return decision


def kept_files(
    files: Sequence[DataFile], written: Mapping[TopicPartition, OffsetRange], cut: Cut
) -> list[DataFile]:
    """The ``files`` to commit for the ``written`` ranges: a file whose rows all lie in them
    as it is, a file with some rows outside them cut (``cut``), a file with none left out."""
    kept = []
    for f in files:
        starts = {
            k.topic_partition: written[k.topic_partition].from_offset
            for k in f.kafka
            if k.topic_partition in written
        }
        if len(starts) == len(f.kafka) and all(
            k.min_offset >= starts[k.topic_partition] for k in f.kafka
        ):
            kept.append(f)
        elif any(
            k.topic_partition in starts and k.max_offset >= starts[k.topic_partition]
            for k in f.kafka
        ):
            rest = cut(f, starts)
            if rest is not None:
                kept.append(rest)
    return kept


def gap_text(plan: BatchPlan, gaps: list[Gap]) -> str:
    """The gaps of ``plan``, one clause per partition, with why a handover in the plan does
    not explain one."""
    return "; ".join(
        f"{tp}: the table holds offsets up to {v}, the batch starts at {r.from_offset}"
        + gap_origin(plan.outside.get(tp), v)
        for tp, v, r in gaps
    )


def gap_error(plan: BatchPlan, gaps: list[Gap], table_path: str, group_id: str) -> SinkGapError:
    """The error refusing ``plan`` for its ``gaps``: what to do about them, and per
    partition the missing offsets ``(table's next, batch's from)``."""
    commands = "; ".join(
        f"spark-groups accept-gap {group_id} --sink-table {table_path} "
        f"--partition {tp.topic}:{tp.partition} --until {r.from_offset}"
        for tp, v, r in gaps
    )
    return SinkGapError(
        f"sink {table_path}: batch {plan.batch_id} would leave a gap: {gap_text(plan, gaps)}. No "
        "other consumer of the group is known to have committed those records "
        "(were they lost to retention, skipped by at-most-once, or was the table "
        "restored?). Nothing was committed, and every member would fail the same "
        "way: to leave the records out of the table, record that decision with "
        f"{commands} (then restart); to read them instead, reset the group to the "
        "table's offsets with spark-groups reset. The source option sink.table "
        "makes members hold such a partition instead of failing",
        gaps={tp: (v, r.from_offset) for tp, v, r in gaps},
    )


def gap_origin(handover: Handover | None, table_offset: int) -> str:
    """Why a handover in the plan does not explain a gap ('' without one)."""
    if handover is None:
        return ""
    return (
        f" ({handover.by} committed [{handover.since}, {handover.until}), but spark_groups had "
        f"committed up to {handover.since}, past the table's {table_offset})"
    )
