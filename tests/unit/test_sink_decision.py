"""The sink's decision per partition, as a pure function of the plan and the table's versions,
and for a whole batch with its files (no table, no files, no broker)."""

from __future__ import annotations

import logging

import pytest

from spark_groups.errors import SinkGapError
from spark_groups.offsets import Handover, OffsetRange, TopicPartition
from spark_groups.sink.decision import (
    BatchDecision,
    PartitionDecision,
    decide,
    decide_batch,
    gap_origin,
    gap_text,
)
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.writer import DataFile

from sink_support import data_file

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


# ---------------------------------------------------------------- a whole batch: decide_batch

TP1, TP2 = TopicPartition("t", 1), TopicPartition("t", 2)


class Cuts:
    """A ``cut`` that records its calls and keeps the file (whose rows it does not read)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[TopicPartition, int]]] = []

    def __call__(self, data_file: DataFile, starts: dict[TopicPartition, int]) -> DataFile:
        self.calls.append((data_file.path, starts))
        return data_file


def decide_it(plan: BatchPlan, versions: dict, files: list, **kw) -> tuple[BatchDecision, Cuts]:
    cuts = Cuts()
    options = {"table_path": "/tables/t", "group_id": "g1", "fail_on_gap": True, **kw}
    return decide_batch(plan, versions, files, cuts, **options), cuts


def test_a_batch_decision_keeps_cuts_and_drops_per_partition() -> None:
    plan = BatchPlan.of(
        4,
        [OffsetRange("t", 0, 100, 150), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 0, 5)],
    )
    low, high = data_file(0, 100, 119, "t"), data_file(0, 120, 149, "t")
    replayed = data_file(1, 0, 9, "t")
    files = [low, high, replayed]
    # p0: the table holds up to 120; p1: a replay; p2: filtered away, never written.
    decision, cuts = decide_it(plan, {TP: 120, TP1: 10}, files)

    assert cuts.calls == []  # no file holds rows both kept and left out
    assert decision.keep == [high]
    assert decision.txns == {TP: 150, TP2: 5}
    assert decision.written == {TP: OffsetRange("t", 0, 120, 150), TP2: OffsetRange("t", 2, 0, 5)}
    assert decision.dropped == [TP1]
    assert decision.versions == {TP: 120, TP1: 10}
    assert decision.outside == {}


def test_a_file_of_many_partitions_is_cut_only_when_it_holds_rows_left_out() -> None:
    plan = BatchPlan.of(
        5,
        [OffsetRange("t", 0, 100, 150), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 0, 5)],
    )
    whole = data_file(0, 100, 149, "t", (2, 0, 4))
    with_replay = data_file(0, 120, 149, "t", (1, 0, 9))
    straddling = data_file(0, 110, 130, "t", (2, 0, 4))
    decision, cuts = decide_it(plan, {TP: 120, TP1: 10}, [with_replay, straddling])
    # p1 is in the table already (left out of the first file), p0 from 120 (the second).
    assert cuts.calls == [(with_replay.path, {TP: 120}), (straddling.path, {TP: 120, TP2: 0})]
    assert decision.keep == [with_replay, straddling]  # as Cuts returns them
    decision, cuts = decide_it(plan, {}, [whole])
    assert cuts.calls == [] and decision.keep == [whole]
    _, cuts = decide_it(plan, {TP: 150, TP1: 10, TP2: 5}, [whole])
    assert cuts.calls == []  # nothing of it is written: left out without reading it


def test_a_batch_decision_records_ranges_another_consumer_committed() -> None:
    plan = BatchPlan.of(7, [PLANNED], [Handover("t", 0, 80, 100, "svc")])
    decision, cuts = decide_it(plan, {TP: 80}, [data_file(0, 100, 149, "t")])
    assert decision.outside == {TP: OUTSIDE} and decision.txns == {TP: 150}
    assert cuts.calls == []


def test_a_batch_that_leaves_a_gap_is_refused_with_what_to_do() -> None:
    plan = BatchPlan.of(
        7, [PLANNED, OffsetRange("t", 1, 0, 10)], [Handover("t", 0, 90, 100, "svc")]
    )
    with pytest.raises(SinkGapError) as refused:
        decide_it(plan, {TP: 80}, [data_file(0, 100, 149, "t")])
    assert refused.value.gaps == {TP: (80, 100)}
    text = str(refused.value)
    assert text.startswith("sink /tables/t: batch 7 would leave a gap: t-0: the table holds")
    assert "(svc committed [90, 100), but spark_groups had committed up to 90" in text
    assert "spark-groups accept-gap g1 --sink-table /tables/t --partition t:0 --until 100" in text


def test_a_gap_is_written_without_fail_on_gap(caplog: pytest.LogCaptureFixture) -> None:
    plan = BatchPlan.of(7, [PLANNED])
    with caplog.at_level(logging.WARNING, logger="spark_groups"):
        decision, _ = decide_it(plan, {TP: 80}, [data_file(0, 100, 149, "t")], fail_on_gap=False)
    assert decision.written == {TP: PLANNED} and decision.txns == {TP: 150}
    assert "batch 7 leaves a gap (failOnGap=false): t-0: the table holds offsets up to 80" in (
        caplog.text
    )


def test_gap_text_says_why_a_handover_does_not_explain_a_gap() -> None:
    plan = BatchPlan.of(1, [PLANNED], [Handover("t", 0, 90, 100, "svc")])
    assert gap_origin(None, 80) == ""
    assert gap_text(plan, [(TP, 80, PLANNED)]) == (
        "t-0: the table holds offsets up to 80, the batch starts at 100 (svc committed "
        "[90, 100), but spark_groups had committed up to 90, past the table's 80)"
    )
