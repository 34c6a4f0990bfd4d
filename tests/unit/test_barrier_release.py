"""A revocation ends when its batch is durable, not at Spark's next trigger.

The checkpoint is written here as Spark writes it (``offsets/<id>`` before a batch,
``commits/<id>`` after it), and ``latest_offset`` (Spark's next trigger) is not called while
the barrier waits: the barrier itself must see the batch durable and commit it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from revocation_support import PendingRevocation
from test_stream import make_stream

from spark_groups.errors import OptionError
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.member import GroupMember
from spark_groups.group.stream import GroupStream
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import BatchOffset, OffsetRange, TopicPartition
from spark_groups.options import parse_options
from spark_groups.storage import checkpoint

from support.broker import produce_ids, wait_until

OTHER = BatchOffset.of(0, [OffsetRange("other", 0, 0, 5)])


def log_batch(chk: Path, spark_id: int, batch: BatchOffset, *, committed: bool) -> None:
    """Write Spark's offset-log entry for ``spark_id`` (and its commit-log entry)."""
    (chk / "offsets").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    text = f"v1\n{json.dumps(meta)}\n{json.dumps(batch.to_json())}"
    (chk / "offsets" / str(spark_id)).write_text(text)
    if committed:
        commit(chk, spark_id)


def ledger_ranges(ledger: OffsetLedger) -> list[tuple[int, int, int]]:
    """Every row of the ledger as ``(partition, until_offset, batch)``, sorted."""
    rows = ledger.history().to_pylist()
    return sorted((r["partition"], r["until_offset"], r["batch"]) for r in rows)


def commit(chk: Path, spark_id: int) -> None:
    (chk / "commits").mkdir(parents=True, exist_ok=True)
    (chk / "commits" / str(spark_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


# ---------------------------------------------------------------------- the checkpoint


def test_a_batch_is_found_by_its_offsets_not_its_number(tmp_path: Path) -> None:
    b0 = BatchOffset.of(0, [OffsetRange("t", 0, 0, 10)])
    b1 = BatchOffset.of(1, [OffsetRange("t", 0, 10, 20)])
    log_batch(tmp_path, 0, b0, committed=True)
    log_batch(tmp_path, 1, b0, committed=True)  # a no-data batch repeats batch 0's offsets
    log_batch(tmp_path, 2, b1, committed=False)
    assert checkpoint.spark_batch_id(str(tmp_path), b0) == 0
    assert checkpoint.spark_batch_id(str(tmp_path), b1) == 2
    assert not checkpoint.is_committed(str(tmp_path), 2)
    assert checkpoint.is_committed(str(tmp_path), 1)
    # Planned but not logged yet, and no checkpoint at all.
    assert checkpoint.spark_batch_id(str(tmp_path), BatchOffset.of(2, b1.ranges)) is None
    assert checkpoint.spark_batch_id(str(tmp_path / "none"), b0) is None


def test_another_querys_commit_log_is_not_durability(tmp_path: Path) -> None:
    log_batch(tmp_path, 0, OTHER, committed=True)
    ours = BatchOffset.of(0, [OffsetRange("t", 0, 0, 10)])
    watch = DurabilityWatch(str(tmp_path), None)
    assert watch.durable(ours, ours.ranges) == []
    with pytest.raises(OptionError) as caught:
        watch.check_checkpoint(ours)
    assert caught.value.option == "checkpointLocation"
    assert "not this query's checkpoint" in str(caught.value)
    log_batch(tmp_path, 1, ours, committed=True)
    watch.check_checkpoint(ours)  # now it is
    assert watch.durable(ours, ours.ranges) == list(ours.ranges)


#: Storage options of a checkpoint on S3 that nothing answers for (a closed loopback port).
UNREACHABLE = {
    "aws_endpoint_url": "http://127.0.0.1:9",
    "aws_region": "us-east-1",
    "aws_access_key_id": "AKIDEXAMPLE",
    "aws_secret_access_key": "s3kr1t-value",
}


def test_a_checkpoint_this_process_cannot_read_fails_the_first_safe_point(tmp_path) -> None:
    # Not created yet is fine: Spark creates it when the query starts.
    DurabilityWatch(str(tmp_path / "new"), None).check_checkpoint(BatchOffset.initial())
    watch = DurabilityWatch("s3a://bucket/chk", None, UNREACHABLE)
    with pytest.raises(OptionError) as caught:
        watch.check_checkpoint(BatchOffset.initial())  # before any batch ran
    assert caught.value.option == "checkpointLocation"
    message = str(caught.value)
    assert "s3a://bucket/chk" in message and "storage.aws_endpoint_url" in message
    assert "fs.s3a" in message  # Spark's own S3A settings do not reach it


def test_the_error_about_an_unreadable_checkpoint_shows_no_secret() -> None:
    echoed = OSError("request signed with secret s3kr1t-value refused")
    error = checkpoint.unreadable("s3://bucket/chk", echoed, UNREACHABLE)
    assert error.option == "checkpointLocation"
    assert "s3kr1t-value" not in str(error) and "***" in str(error)
    local = checkpoint.unreadable("/chk", PermissionError("denied"))
    assert "storage." not in str(local) and "denied" in str(local)


def test_the_option_is_parsed() -> None:
    opts = parse_options(
        {
            "kafka.bootstrap.servers": "b:9092",
            "subscribe": "t",
            "group.id": "g",
            "checkpointlocation": " /chk/a ",
        }
    )
    assert opts.checkpoint == "/chk/a"


# ---------------------------------------------------------------------- the barrier


def newcomer_of(servers: str, topic: str, group: str) -> GroupMember:
    config = parse_options(
        {"kafka.bootstrap.servers": servers, "subscribe": topic, "group.id": group}
    ).member_config()
    config.update({"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"})
    return GroupMember(config, [topic]).start()


def handover_without_a_trigger(
    stream: GroupStream, servers: str, topic: str, group: str, make_durable: Callable[[], None]
) -> tuple[GroupMember, frozenset[TopicPartition]]:
    """Batch 0 is planned; a newcomer joins; the barrier must wait until ``make_durable``
    and then end with no ``latest_offset`` call. Returns the newcomer and what moved."""
    looks = []
    real = stream._durability.durable

    def durable(batch: BatchOffset, ranges: Any) -> list[OffsetRange]:
        looks.append(batch.batch)  # a spy: the real check still decides
        return real(batch, ranges)

    stream._durability.durable = durable  # type: ignore[method-assign]
    newcomer = newcomer_of(servers, topic, group)
    wait_until(lambda: len(looks) >= 2, what="the barrier never looked for its batch")
    member = stream.ensure_started()
    everything = [TopicPartition(topic, p) for p in range(2)]
    # Not durable yet: nothing is committed and nothing has moved.
    assert member.committed(everything) == {}
    assert newcomer.assignment == frozenset()
    make_durable()
    wait_until(lambda: bool(newcomer.assignment), what="the newcomer never got a partition")
    return newcomer, newcomer.assignment


def test_the_barrier_ends_when_the_checkpoint_commits_the_batch(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(50 * 2), 2)
    chk = tmp_path / "chk"
    stream = make_stream(
        streams, bootstrap_servers, topic, group, tmp_path / "ledger",
        checkpointLocation=str(chk),
    )  # fmt: skip
    in_flight = stream.latest_offset(BatchOffset.initial().to_json(), None)
    batch = BatchOffset.from_json(in_flight)
    log_batch(chk, 0, batch, committed=False)  # Spark logs the batch and runs it
    newcomer, moved = handover_without_a_trigger(
        stream, bootstrap_servers, topic, group, lambda: commit(chk, 0)
    )
    try:
        # The newcomer resumes exactly where batch 0 ended, committed by the barrier.
        assert newcomer.committed(moved) == {tp: 50 for tp in moved}
        ledger = OffsetLedger(str(tmp_path / "ledger"), group)
        assert ledger.latest_positions(list(moved)) == {tp: 50 for tp in moved}
        # Spark's next trigger commits the rest of batch 0, and the moved partitions once.
        stream.latest_offset(in_flight, None)
        stream._behind.wait()  # the ledger's append lands behind the safe point
        assert ledger_ranges(ledger) == [(0, 50, 0), (1, 50, 0)]
        assert stream.metrics.failed_commits == 0
        assert stream.metrics.barrier_timeouts == 0
    finally:
        newcomer.close()


def test_the_barrier_ends_when_the_sink_holds_the_partitions(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    from spark_groups.sink import DeltaSink

    from sink_support import SCHEMA, plan, rows, write_task

    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(50 * 2), 2)
    sink_table = tmp_path / "sink"
    stream = make_stream(
        streams, bootstrap_servers, topic, group, tmp_path / "ledger",
        **{"sink.table": str(sink_table)},
    )  # fmt: skip
    in_flight = stream.latest_offset(BatchOffset.initial().to_json(), None)
    assert BatchOffset.from_json(in_flight).ends() == {
        TopicPartition(topic, 0): 50,
        TopicPartition(topic, 1): 50,
    }

    def sink_commits_batch_0() -> None:
        files = write_task(sink_table, [rows(p, range(50), topic=topic) for p in range(2)])
        DeltaSink(str(sink_table), group).commit(
            plan(0, {0: (0, 50), 1: (0, 50)}, topic=topic), files, SCHEMA
        )

    newcomer, moved = handover_without_a_trigger(
        stream, bootstrap_servers, topic, group, sink_commits_batch_0
    )
    try:
        assert newcomer.committed(moved) == {tp: 50 for tp in moved}
        ledger = OffsetLedger(str(tmp_path / "ledger"), group)
        assert ledger.latest_positions(list(moved)) == {tp: 50 for tp in moved}
        assert stream.metrics.barrier_timeouts == 0
    finally:
        newcomer.close()


def test_without_a_signal_the_barrier_still_waits_for_the_trigger(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    """A checkpoint that never commits the batch keeps the partitions until Spark's next
    trigger commits it (the barrier never commits what is not durable)."""
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(20 * 2), 2)
    chk = tmp_path / "chk"
    stream = make_stream(
        streams, bootstrap_servers, topic, group, tmp_path / "ledger",
        checkpointLocation=str(chk),
    )  # fmt: skip
    in_flight = stream.latest_offset(BatchOffset.initial().to_json(), None)
    log_batch(chk, 0, OTHER, committed=True)  # another query's batch 0 is committed

    def spark_trigger() -> None:
        log_batch(chk, 0, BatchOffset.from_json(in_flight), committed=True)
        stream.latest_offset(in_flight, None)

    newcomer, moved = handover_without_a_trigger(
        stream, bootstrap_servers, topic, group, spark_trigger
    )
    try:
        assert newcomer.committed(moved) == {tp: 20 for tp in moved}
    finally:
        newcomer.close()


def test_a_revocation_pending_during_sparks_commit_runs_after_it(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    """The revocation is pending while Spark's next trigger commits the very batch it waits
    for and plans the next: it is delivered after those requests, never inside one, finds
    the batch committed, and the newcomer resumes where batch 0 ended. (Under load the
    revocation once ran inside the commit's request and waited for it: "the group member did
    not answer within 30 s".) The owner thread's own polls are held back until the trigger is
    done, so the rebalance is pending through all of it: reached every time."""
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(50 * 2), 2)
    stream = make_stream(streams, bootstrap_servers, topic, group, tmp_path / "ledger")
    in_flight = stream.latest_offset(BatchOffset.initial().to_json(), None)  # batch 0
    with PendingRevocation(stream) as pending:
        newcomer = newcomer_of(bootstrap_servers, topic, group)
        try:
            pending.wait_until_rebalancing(bootstrap_servers, 2)
            stream.latest_offset(in_flight, None)  # Spark finished batch 0: the safe point
            assert "_safe_point" in pending.requests and "_record_plan" in pending.requests
            assert stream.metrics.revocations == 0  # still pending: no request delivered it
            pending.deliver()
            wait_until(lambda: bool(newcomer.assignment), what="the newcomer never got a partition")
            assert pending.running_at_revocation and set(pending.running_at_revocation) == {0}
            moved = newcomer.assignment
            assert len(moved) == 1
            # The newcomer resumes where batch 0 ended; each range was committed once.
            assert newcomer.committed(moved) == {tp: 50 for tp in moved}
            stream._behind.wait()  # the safe point's ledger append lands behind it
            assert ledger_ranges(OffsetLedger(str(tmp_path / "ledger"), group)) == [
                (0, 50, 0),
                (1, 50, 0),
            ]
            assert stream.metrics.failed_commits == 0
            assert stream.metrics.barrier_timeouts == 0
        finally:
            newcomer.close()
