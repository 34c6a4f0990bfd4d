"""Say it once: the group and table a batch belongs to, from the source to the sink, and the
checks that stop a pipeline whose source and sink disagree (issue 43). No broker, no Spark:
real Delta tables in tmp_path. The same cases end to end:
tests/integration/test_pipeline_agreement.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spark_groups.errors import (
    OptionError,
    PipelineMismatchError,
    SinkError,
    SinkNotWrittenError,
)
from spark_groups.group.committer import BatchCommitter, CommitMetadata
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.resume import other_table
from spark_groups.group.state import DriverState
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import BatchOffset, OffsetRange, Pipeline, TopicPartition, commit_metadata
from spark_groups.options import parse_options
from spark_groups.options.sink import SinkOptions, parse_sink_options
from spark_groups.sink import claim_tokens
from spark_groups.sink.delta_arbiter import DeltaArbiter
from spark_groups.sink.group_commit import DeltaSink
from spark_groups.sink.pipeline import SinkTarget, check_target, target_of
from spark_groups.sink.plan import parse_offset_log

from sink_support import SCHEMA, TOPIC, plan, rows, write_task

TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


def test_a_batch_offset_carries_its_pipeline_without_it_being_part_of_its_identity() -> None:
    planned = BatchOffset.of(3, [OffsetRange(TOPIC, 0, 0, 5)], pipeline=Pipeline("g", "/t/a"))
    value = planned.to_json()
    assert value["group"] == "g" and value["sink"] == "/t/a"
    back = BatchOffset.from_json(value)
    assert back.pipeline == Pipeline("g", "/t/a")
    # Offsets logged before the pipeline was recorded still parse, and name the same batch.
    older = {k: v for k, v in value.items() if k not in ("group", "sink")}
    assert BatchOffset.from_json(older).pipeline is None
    assert BatchOffset.from_json(older) == back
    no_sink = BatchOffset.of(3, [OffsetRange(TOPIC, 0, 0, 5)], pipeline=Pipeline("g"))
    assert "sink" not in no_sink.to_json()
    assert BatchOffset.from_json(no_sink.to_json()).pipeline == Pipeline("g", None)


def sink_options(**given: str) -> SinkOptions:
    return parse_sink_options({"checkpointLocation": "/chk", **given})


def test_the_sink_takes_table_and_group_from_the_source() -> None:
    source = Pipeline("orders-etl", "/tables/orders")
    assert target_of(sink_options(), source, 0) == SinkTarget("/tables/orders", "orders-etl")
    # Said twice, agreeing (a trailing slash is the same table): allowed.
    agreeing = sink_options(path="/tables/orders/", **{"group.id": "orders-etl"})
    assert target_of(agreeing, source, 0) == SinkTarget("/tables/orders", "orders-etl")
    # A source without sink.table names only the group; the sink names the table.
    assert target_of(sink_options(path="/t/x"), Pipeline("g"), 0) == SinkTarget("/t/x", "g")
    # Offsets that record nothing (an older release): the sink's own options, as before.
    both = sink_options(path="/t/x", **{"group.id": "g"})
    assert target_of(both, None, 0) == SinkTarget("/t/x", "g")


def test_a_sink_that_disagrees_with_its_source_names_both_values_and_the_option() -> None:
    source = Pipeline("g2", "/tables/a")
    with pytest.raises(PipelineMismatchError) as table:
        target_of(sink_options(path="/tables/b"), source, 4)
    assert table.value.option == "path" and table.value.source_option == "sink.table"
    assert (table.value.sink_value, table.value.source_value, table.value.batch) == (
        "/tables/b",
        "/tables/a",
        4,
    )
    assert "/tables/b" in str(table.value) and "/tables/a" in str(table.value)
    with pytest.raises(PipelineMismatchError) as group:
        target_of(sink_options(**{"group.id": "g3"}), source, 4)
    assert group.value.option == "group.id" and "'g3'" in str(group.value)
    assert "'g2'" in str(group.value) and "Nothing of the batch was written" in str(group.value)


def test_the_other_shared_settings_agree_where_both_sides_give_them() -> None:
    """checkpointLocation and the storage.* options without secrets; credentials never
    travel in the offsets (the sink needs its own)."""
    source = parse_options(
        {
            "kafka.bootstrap.servers": "b:9092",
            "subscribe": "t",
            "group.id": "g",
            "sink.table": "/t/a",
            "checkpointLocation": "/chk",
            "storage.aws_region": "eu-west-1",
            "storage.aws_secret_access_key": "very-secret",
        }
    ).pipeline
    value = BatchOffset.initial(source).to_json()
    assert value["checkpoint"] == "/chk" and value["storage"] == {"aws_region": "eu-west-1"}
    assert "very-secret" not in str(value)
    assert BatchOffset.from_json(value).pipeline == source
    same = sink_options(**{"storage.aws_region": "eu-west-1", "storage.aws_endpoint_url": "x"})
    assert target_of(same, source, 0) == SinkTarget("/t/a", "g")
    with pytest.raises(PipelineMismatchError) as region:
        target_of(sink_options(**{"storage.aws_region": "us-east-1"}), source, 2)
    assert region.value.option == "storage.aws_region"
    assert (region.value.sink_value, region.value.source_value) == ("us-east-1", "eu-west-1")
    elsewhere = parse_sink_options({"checkpointLocation": "/other"})
    with pytest.raises(PipelineMismatchError) as checkpoint:
        target_of(elsewhere, source, 2)
    assert checkpoint.value.option == "checkpointLocation" and "/other" in str(checkpoint.value)


def test_neither_side_naming_the_table_or_the_group_is_an_option_error() -> None:
    with pytest.raises(OptionError) as path:
        target_of(sink_options(), Pipeline("g"), 0)
    assert path.value.option == "path" and "sink.table" in str(path.value)
    with pytest.raises(OptionError) as group:
        target_of(sink_options(path="/t/x"), None, 0)
    assert group.value.option == "group.id"


def test_the_commit_refuses_a_plan_that_names_another_target_than_the_tasks_wrote() -> None:
    check_target(SinkTarget("/t/a", "g"), SinkTarget("/t/a/", "g"), 1)
    with pytest.raises(PipelineMismatchError) as wrong:
        check_target(SinkTarget("/t/a", "g"), SinkTarget("/t/b", "g"), 1)
    assert wrong.value.option == "path"
    with pytest.raises(PipelineMismatchError):
        check_target(SinkTarget("/t/a", "g"), SinkTarget("/t/a", "h"), 1)


def offset_log(*offsets: BatchOffset) -> str:
    lines = ["v1", '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}']
    import json

    lines += [json.dumps(o.to_json()) for o in offsets]
    return "\n".join(lines)


def test_a_plan_takes_its_pipeline_and_refuses_sources_of_two_groups() -> None:
    a = BatchOffset.of(0, [OffsetRange("a", 0, 0, 5)], pipeline=Pipeline("g", "/t"))
    b = BatchOffset.of(0, [OffsetRange("b", 0, 0, 5)], pipeline=Pipeline("g", "/t"))
    assert parse_offset_log(offset_log(a, b), 7).pipeline == Pipeline("g", "/t")
    other = BatchOffset.of(0, [OffsetRange("b", 0, 0, 5)], pipeline=Pipeline("h", "/t"))
    with pytest.raises(SinkError, match="different groups or tables"):
        parse_offset_log(offset_log(a, other), 7)


def test_commit_metadata_names_the_table_and_the_next_owner_finds_another() -> None:
    text = commit_metadata.make("m-1", "batch 3", sink="/tables/a")
    assert commit_metadata.read(text).sink == "/tables/a"
    assert commit_metadata.read(commit_metadata.make("m-1", "batch 3")).sink is None
    assert "sink" not in commit_metadata.make("m", "b", sink="/" + "x" * 2000)  # stays small
    kafka = {
        TP0: (10, text),
        TP1: (4, ""),  # a plain consumer: no table
    }
    assert other_table(kafka, "/tables/a/") is None
    found = other_table(kafka, "/tables/b")
    assert found is not None and found[0] == TP0 and found[1].sink == "/tables/a"


# ---------------------------------------------------------------------- the source's check


def committer(table: Path) -> tuple[BatchCommitter, DriverState, DeltaArbiter]:
    state = DriverState()
    state.partitions.begin_resume({TP0, TP1})
    for tp in (TP0, TP1):
        state.partitions.resume(tp, 0)
    arbiter = DeltaArbiter(str(table), "g")
    made = BatchCommitter(
        state, None, DurabilityWatch(None, arbiter), StreamMetrics(), CommitMetadata("", str(table))
    )
    return made, state, arbiter


class Member:
    """The member as the commit path sees it: it owns both partitions and commits all."""

    member_id = "m"
    generation = 1
    closed = False
    assignment = frozenset({TP0, TP1})

    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, int]] = []

    def commit(self, offsets, *, metadata):  # type: ignore[no-untyped-def]
        self.commits.append(dict(offsets))
        return frozenset(offsets)


def land(table: Path, batch: int, ranges: dict[int, tuple[int, int]]) -> None:
    files = write_task(table, [rows(p, range(lo, hi)) for p, (lo, hi) in ranges.items()])
    DeltaSink(str(table), "g").commit(plan(batch, ranges), files, SCHEMA)


def test_a_finished_batch_missing_from_a_table_that_does_not_exist_stops_the_query(
    tmp_path: Path,
) -> None:
    commit, books, _ = committer(tmp_path / "never-written")
    batch = BatchOffset.of(0, [OffsetRange(TOPIC, 0, 0, 5)])
    books.batches.add(batch)
    member = Member()
    with pytest.raises(SinkNotWrittenError) as stopped:
        commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert stopped.value.option == "sink.table" and stopped.value.partitions == (TP0,)
    assert member.commits == []  # nothing to Kafka


def test_a_range_missing_under_a_claim_that_did_not_move_stops_the_query_without_the_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "t"
    commit, books, arbiter = committer(table)
    land(table, 0, {0: (0, 3), 1: (0, 3)})  # the table exists; the sink wrote batch 0
    token = arbiter.new_token()
    assert arbiter.claim([TP0, TP1], token, member="m") is not None
    books.partitions.set_claim(TP0, token)
    # Batch 1 ran, but nothing wrote it into the table (another sink did the writing).
    batch = BatchOffset.of(1, [OffsetRange(TOPIC, 0, 3, 6)], claims={TP0: token})
    books.batches.add(batch)
    member = Member()
    with (
        caplog.at_level(logging.WARNING, logger="spark_groups"),
        pytest.raises(SinkNotWrittenError) as stopped,
    ):
        commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert stopped.value.batch == 1 and str(table) in str(stopped.value)
    assert member.commits == []
    assert "claim moved on" not in caplog.text


def test_a_range_read_before_the_table_had_claims_and_missing_from_it_stops_the_query(
    tmp_path: Path,
) -> None:
    """Another engine (delta-spark's format("delta")) created the table at sink.table: the
    first batch was planned before any claim, and the table has none."""
    table = tmp_path / "t"
    commit, books, _ = committer(table)
    land(table, 0, {1: (0, 3)})  # the table exists; partition 0 was never written or claimed
    batch = BatchOffset.of(1, [OffsetRange(TOPIC, 0, 0, 4)])
    books.batches.add(batch)
    member = Member()
    with pytest.raises(SinkNotWrittenError) as stopped:
        commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert stopped.value.partitions == (TP0,) and member.commits == []


def test_a_range_the_sink_fenced_is_left_out_with_the_warning_and_the_query_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "t"
    commit, books, arbiter = committer(table)
    land(table, 0, {0: (0, 3), 1: (0, 3)})
    old, new = arbiter.new_token(), arbiter.new_token()
    arbiter.claim([TP0, TP1], old, member="m")
    for tp in (TP0, TP1):
        books.partitions.set_claim(tp, old)
    claim_tokens.claim(str(table), "g", [TP0], new)  # the partition's next owner claimed it
    batch = BatchOffset.of(
        1, [OffsetRange(TOPIC, 0, 3, 6), OffsetRange(TOPIC, 1, 0, 3)], claims={TP0: old, TP1: old}
    )
    books.batches.add(batch)
    member = Member()
    with caplog.at_level(logging.WARNING, logger="spark_groups"):
        commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert member.commits == [{TP1: 3}]  # what the table holds, not the fenced range
    assert "claim moved on" in caplog.text
