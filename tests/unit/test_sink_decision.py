"""The sink's decision per partition, as a pure function of the plan and the table's versions
(no table, no broker)."""

from __future__ import annotations

import pytest

from spark_groups.offsets import Handover, OffsetRange, TopicPartition
from spark_groups.sink.decision import PartitionDecision, decide
from spark_groups.sink.plan import BatchPlan

TP = TopicPartition("t", 0)
PLANNED = OffsetRange("t", 0, 100, 150)  # [100, 150)
OUTSIDE = (80, 100, "svc")  # [80, 100) committed by "svc"


@pytest.mark.parametrize(
    ("version", "handover", "expected"),
    [
        (None, None, PartitionDecision("write", 100, None)),  # a new table or partition
        (100, None, PartitionDecision("write", 100, 100)),  # the table ends where we start
        (120, None, PartitionDecision("write", 120, 120)),  # rows below 120 are in already
        (150, None, PartitionDecision("drop", 150, 150)),  # the whole range is in (a replay)
        (170, None, PartitionDecision("drop", 150, 170)),
        (80, None, PartitionDecision("gap", 100, 80)),  # [80, 100) was never written
        # Another consumer of the group committed [80, 100): accounted for, not a gap.
        (80, Handover("t", 0, 80, 100, "svc"), PartitionDecision("write", 100, 80, OUTSIDE)),
        (80, Handover("t", 0, None, 100, "svc"), PartitionDecision("write", 100, 80, OUTSIDE)),
        # A handover that does not cover the whole gap explains nothing.
        (80, Handover("t", 0, 90, 100, "svc"), PartitionDecision("gap", 100, 80)),
        (80, Handover("t", 0, 80, 95, "svc"), PartitionDecision("gap", 100, 80)),
    ],
)
def test_decision_per_partition(
    version: int | None, handover: Handover | None, expected: PartitionDecision
) -> None:
    plan = BatchPlan.of(7, [PLANNED], [handover] if handover else [])
    versions = {} if version is None else {TP: version}
    assert decide(plan, versions) == {TP: expected}


def test_every_planned_partition_gets_one_decision() -> None:
    ranges = [OffsetRange("t", p, 0, 10) for p in range(3)]
    decisions = decide(BatchPlan.of(0, ranges), {TopicPartition("t", 1): 10})
    assert [d.action for d in decisions.values()] == ["write", "drop", "write"]
    assert list(decisions) == sorted(decisions)
