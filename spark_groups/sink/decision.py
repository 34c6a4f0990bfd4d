"""What the sink writes of a batch, decided from the batch's plan and the table's versions.

Pure: no table, no files, no clock. :class:`~spark_groups.sink.commit.DeltaSink` reads the
table's transaction version of every partition (one snapshot), asks :func:`decide`, and then
does the I/O the answer calls for (cutting files, raising, committing).

For each planned partition, with ``v`` the table's version (the next offset it expects, or
none) and ``[from, until)`` the planned range:

==========================  ============================================================
the table                   the decision
==========================  ============================================================
``v >= until``              ``drop``: the range is in the table already (a replay)
no ``v``, or ``v == from``  ``write`` from ``from``
``from < v < until``        ``write`` from ``v``: the rows below ``v`` are in the table
``v < from``, explained     ``write`` from ``from``, recording ``[v, from)`` as committed
                            by another consumer of the group (the plan's handover)
``v < from``, unexplained   ``gap``: writing from ``from`` would leave records that were
                            never written; the sink refuses the batch (``SinkGapError``)
                            unless ``failOnGap=false``, which writes it anyway
==========================  ============================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from spark_groups.offsets import TopicPartition
from spark_groups.sink.plan import BatchPlan

Action = Literal["drop", "write", "gap"]


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
    plan: BatchPlan, versions: Mapping[TopicPartition, int]
) -> dict[TopicPartition, PartitionDecision]:
    """The decision for every partition of ``plan`` against the table's ``versions``."""
    out: dict[TopicPartition, PartitionDecision] = {}
    for tp in sorted(plan.ranges):
        planned = plan.ranges[tp]
        version = versions.get(tp)
        if version is not None and version >= planned.until_offset:
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
