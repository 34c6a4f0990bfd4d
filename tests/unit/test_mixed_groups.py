"""Mixed groups without Spark: commit metadata, handovers, the sink's gap decision, held
partitions and ``accept-gap`` (issue 13). The member tests use the session's Kafka."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from spark_groups.errors import SinkError, SinkGapError
from spark_groups.group import holds, resume
from spark_groups.group.member import GroupMember
from spark_groups.ledger import OUTSIDE_BATCH, OffsetLedger
from spark_groups.offsets import BatchOffset, Handover, OffsetRange, TopicPartition, commit_metadata
from spark_groups.sink.accepted_gaps import accept_gap
from spark_groups.sink.group_commit import DeltaSink, committed_positions
from spark_groups.sink.plan import BatchPlan, parse_offset_log
from spark_groups.tools.cli import main

from sink_support import SCHEMA, TOPIC, offsets_in, rows, write_task

TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
SERVICE = commit_metadata.read("").text  # what a kafka-python service's commit says


def sink(table: Path, **kw) -> DeltaSink:
    return DeltaSink(str(table), "g1", member="test", **kw)


def plan(batch: int, ranges: dict[int, tuple[int, int]], outside=()) -> BatchPlan:
    return BatchPlan.of(
        batch, [OffsetRange(TOPIC, p, lo, hi) for p, (lo, hi) in ranges.items()], list(outside)
    )


# ---------------------------------------------------------------------- commit metadata


def test_commit_metadata_says_who_committed_and_tells_ours_from_others() -> None:
    mine = commit_metadata.make("rdkafka-123", "batch 7", "etl-a")
    assert json.loads(mine) == {
        "by": "spark_groups", "member": "rdkafka-123", "what": "batch 7", "client": "etl-a"
    }  # fmt: skip
    who = commit_metadata.read(mine)
    assert who.ours and "rdkafka-123" in who.text and "batch 7" in who.text
    assert not commit_metadata.read("").ours and not commit_metadata.read(None).ours
    other = commit_metadata.read("svc-1\x00" + "x" * 200)  # another client's, long, binary
    assert not other.ours and "svc-1?" in other.text and len(other.text) < 160
    assert not commit_metadata.read('{"by": "someone-else"}').ours


def test_every_commit_of_the_member_carries_metadata_that_kafka_returns(
    bootstrap_servers: str, make_topic
) -> None:
    topic = make_topic(1)
    group = f"g-meta-{topic}"
    member = GroupMember(
        {"bootstrap.servers": bootstrap_servers, "group.id": group}, [topic]
    ).start()
    try:
        assert member.wait_for_assignment(30)
        tp = TopicPartition(topic, 0)
        member.commit({tp: 5}, metadata=commit_metadata.make(member.member_id, "batch 3"))
        offset, metadata = member.committed_with_metadata([tp])[tp]
        assert offset == 5
        assert commit_metadata.read(metadata).ours
        assert member.member_id in commit_metadata.read(metadata).text
        assert member.committed([tp]) == {tp: 5}
    finally:
        member.close()


# ---------------------------------------------------------------------- handovers


def test_a_commit_of_another_consumer_past_our_position_is_a_handover() -> None:
    ours = commit_metadata.make("m", "batch 1")
    kafka = {
        TP0: (40, ""),  # the service committed past where we stood (30)
        TP1: (30, ours),  # our own commit
        TopicPartition(TOPIC, 2): (20, ""),  # another consumer, but not past us (25)
        TopicPartition(TOPIC, 3): (9, "svc"),  # another consumer; we never stood anywhere
    }
    positions = {TP0: 30, TP1: 10, TopicPartition(TOPIC, 2): 25}
    found = resume.handovers(kafka, positions)
    assert found == {
        TP0: Handover(TOPIC, 0, 30, 40, SERVICE),
        TopicPartition(TOPIC, 3): Handover(TOPIC, 3, None, 9, commit_metadata.read("svc").text),
    }


def test_a_handover_explains_exactly_the_gap_it_covers() -> None:
    h = Handover(TOPIC, 0, 30, 40, SERVICE)
    assert h.explains(30, 40)  # table at our last position
    assert h.explains(35, 40)  # the table one batch ahead of the ledger
    assert not h.explains(29, 40)  # records [29, 30) are ours and missing: loss
    assert not h.explains(30, 41)  # the batch does not start where the service committed
    assert Handover(TOPIC, 0, None, 40, SERVICE).explains(0, 40)


def test_handovers_travel_in_the_batch_offset_into_the_sinks_plan() -> None:
    h = Handover(TOPIC, 0, 30, 40, SERVICE)
    batch = BatchOffset.of(5, [OffsetRange(TOPIC, 0, 40, 50)], [h])
    value = batch.to_json()
    assert value["outside"] == {TOPIC: {"0": [30, 40, SERVICE]}}
    assert BatchOffset.from_json(json.loads(json.dumps(value))) == batch
    assert "outside" not in BatchOffset.of(5, [OffsetRange(TOPIC, 0, 40, 50)]).to_json()
    log_text = "v1\n{}\n" + json.dumps(value) + "\n"
    assert parse_offset_log(log_text, 5).outside == {TP0: h}


# ---------------------------------------------------------------------- the sink


def test_the_sink_accepts_a_gap_another_consumer_committed_and_records_it(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 10)}), write_task(table, [rows(0, range(10))]), SCHEMA)
    # The service handled [10, 20) and committed 20; the ledger had 10.
    h = Handover(TOPIC, 0, 10, 20, SERVICE)
    files = write_task(table, [rows(0, range(20, 25))])
    result = sink(table).commit(plan(1, {0: (20, 25)}, [h]), files, SCHEMA)

    assert result.written == {TP0: OffsetRange(TOPIC, 0, 20, 25)}
    assert offsets_in(table, 0) == [*range(10), *range(20, 25)]
    entry = DeltaTable(str(table)).history(1)[0]
    assert json.loads(entry["spark_groups.outside"]) == {TOPIC: {"0": [10, 20, SERVICE]}}


def test_the_sink_still_refuses_a_gap_no_handover_explains(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink(table).commit(plan(0, {0: (0, 10)}), write_task(table, [rows(0, range(10))]), SCHEMA)
    version = DeltaTable(str(table)).version()
    # The handover starts past the table: [10, 15) were ours and are missing.
    late = Handover(TOPIC, 0, 15, 20, SERVICE)
    with pytest.raises(SinkGapError, match=r"orders-0.*another consumer.*accept-gap g1") as e:
        sink(table).commit(
            plan(1, {0: (20, 25)}, [late]), write_task(table, [rows(0, range(20, 25))]), SCHEMA
        )
    assert e.value.gaps == {TP0: (10, 20)}
    # A handover of another range does not explain it either; no handover at all neither.
    other = Handover(TOPIC, 0, 10, 18, SERVICE)
    for outside in ([other], []):
        with pytest.raises(SinkGapError, match="--partition orders:0 --until 20"):
            sink(table).commit(
                plan(1, {0: (20, 25)}, outside), write_task(table, [rows(0, range(20, 25))]), SCHEMA
            )
    assert DeltaTable(str(table)).version() == version


def test_accept_gap_records_the_decision_and_the_refused_batch_then_commits(
    tmp_path: Path,
) -> None:
    table, ledger = tmp_path / "t", tmp_path / "ledger"
    sink(table).commit(plan(0, {0: (0, 10)}), write_task(table, [rows(0, range(10))]), SCHEMA)
    refused = write_task(table, [rows(0, range(20, 25))])
    with pytest.raises(SinkGapError):
        sink(table).commit(plan(1, {0: (20, 25)}), refused, SCHEMA)

    result = CliRunner().invoke(
        main,
        ["accept-gap", "g1", "--sink-table", str(table), "--partition", f"{TOPIC}:0",
         "--until", "20", "--offsets-table", str(ledger), "--reason", "lost to retention"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "accepted the gap [10, 20)" in result.output
    assert committed_positions(str(table), "g1", [TP0]) == {TP0: 20}
    entry = DeltaTable(str(table)).history(1)[0]
    assert json.loads(entry["spark_groups.accepted_gap"]) == {TOPIC: {"0": [10, 20]}}
    assert entry["spark_groups.reason"] == "lost to retention"
    assert entry["spark_groups.member"].startswith("accept-gap:")
    rows_ = OffsetLedger(str(ledger), "g1").history().to_pylist()
    assert [(r["from_offset"], r["until_offset"], r["batch"]) for r in rows_] == [
        (10, 20, OUTSIDE_BATCH)
    ]
    # Spark's retry of the refused batch commits now.
    sink(table).commit(plan(1, {0: (20, 25)}), write_task(table, [rows(0, range(20, 25))]), SCHEMA)
    assert offsets_in(table, 0) == [*range(10), *range(20, 25)]
    # Again: nothing to do. A partition the group never wrote has no gap.
    assert accept_gap(str(table), "g1", TP0, 20, "me").version is None
    with pytest.raises(SinkError, match="has written nothing of orders-1"):
        accept_gap(str(table), "g1", TP1, 20, "me")


def test_the_ledger_keeps_where_spark_groups_itself_stood(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from spark_groups.ledger import LedgerRow

    ledger = OffsetLedger(str(tmp_path / "ledger"), "g1")
    now = datetime.now(UTC)
    ledger.append([LedgerRow(TOPIC, 0, 0, 10, "m", 1, 0, now)])
    ledger.append([LedgerRow(TOPIC, 0, 10, 20, SERVICE, -1, OUTSIDE_BATCH, now)])
    assert ledger.latest_positions([TP0]) == {TP0: 20}
    assert ledger.latest_positions([TP0], own_only=True) == {TP0: 10}


# ---------------------------------------------------------------------- held partitions


def test_a_partition_the_sink_would_get_an_unexplained_gap_in_is_held() -> None:
    h = Handover(TOPIC, 1, 10, 20, SERVICE)
    held = holds.unexplained(
        positions={TP0: 20, TP1: 20, TopicPartition(TOPIC, 2): 5},
        table={TP0: 10, TP1: 10, TopicPartition(TOPIC, 2): 5},
        handovers={TP1: h},
        committed_by={TP0: "spark_groups member m, batch 3"},
    )
    assert list(held) == [TP0]
    message = held[TP0].message("g1", "/data/orders", "/data/_offsets")
    assert "[10, 20)" in message and "spark_groups member m" in message
    assert "spark-groups accept-gap g1 --sink-table /data/orders --partition orders:0" in message
    assert "--until 20 --offsets-table /data/_offsets" in message
    assert list(holds.released(held, {TP0: 19})) == []
    assert list(holds.released(held, {TP0: 20})) == [TP0]
