"""The driver's bookkeeping (GroupStream) against a real broker, without Spark.

These drive the calls Spark makes (latest_offset as the safe point) directly, so the rules
of planning, committing and the revocation barrier are checked without a JVM.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from spark_groups.group.member import GroupMember
from spark_groups.group.partitions import Status
from spark_groups.group.stream import GroupStream
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import BatchOffset, TopicPartition
from spark_groups.options import parse_options
from spark_groups.sink.delta_arbiter import for_source

from support.broker import produce_ids

FAST = {"kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}


def make_stream(
    streams: list[GroupStream],
    servers: str,
    topic: str,
    group: str,
    ledger: Path | None,
    **extra: str,
) -> GroupStream:
    opts = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "group.id": group,
        "startingOffsets": "earliest",
        **FAST,
        **extra,
    }
    if ledger is not None:
        opts["offsets.table"] = str(ledger)
    options = parse_options(opts)
    stream = GroupStream(options, for_source(options))
    streams.append(stream)
    return stream


def revoking(stream: GroupStream, tp: TopicPartition) -> bool:
    """Whether the stream has begun revoking ``tp``."""
    state = stream._partitions.get(tp)
    return state is not None and state.status is Status.REVOKING


def test_plan_then_commit_at_the_next_call(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 2), 2)
    stream = make_stream(streams, bootstrap_servers, topic, group, tmp_path / "ledger")
    initial = BatchOffset.initial().to_json()
    first = stream.latest_offset(initial, None)
    batch = BatchOffset.from_json(first)
    assert batch.batch == 0
    assert batch.ends() == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}
    # Planned is not committed: nothing in Kafka or the ledger yet.
    member = stream.ensure_started()
    assert member.committed([TopicPartition(topic, 0)]) == {}
    # The next call is the safe point: batch 0 is committed, and with no new data the
    # same offset comes back (no new batch).
    assert stream.latest_offset(first, None) is first
    assert member.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)]) == {
        TopicPartition(topic, 0): 10,
        TopicPartition(topic, 1): 10,
    }
    stream._behind.wait()  # the ledger's append lands behind the safe point
    rows = OffsetLedger(str(tmp_path / "ledger"), group).history().to_pylist()
    assert [(r["partition"], r["from_offset"], r["until_offset"], r["batch"]) for r in rows] == [
        (0, 0, 10, 0),
        (1, 0, 10, 0),
    ]
    assert all(r["member_id"] == member.member_id for r in rows)


def test_read_limit_splits_the_backlog(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(30 * 2), 2)
    stream = make_stream(streams, bootstrap_servers, topic, f"g-{uuid.uuid4().hex[:8]}", None)
    offset = BatchOffset.initial().to_json()
    sizes = []
    for _ in range(10):
        nxt = stream.latest_offset(offset, 20)
        if nxt is offset:
            break
        sizes.append(sum(r.size for r in BatchOffset.from_json(nxt).ranges))
        offset = nxt
    assert sizes == [20, 20, 20]


def test_available_now_stops_at_the_end_seen_at_start(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(5 * 1), 1)
    stream = make_stream(streams, bootstrap_servers, topic, group, None)
    stream.prepare_available_now()
    produce_ids(bootstrap_servers, topic, range(5 * 1), 1)  # arrives after the start: not read
    first = stream.latest_offset(BatchOffset.initial().to_json(), None)
    assert BatchOffset.from_json(first).ends() == {TopicPartition(topic, 0): 5}
    assert stream.latest_offset(first, None) is first
    # That was the end of the query: the last batch is committed and the member has left,
    # without waiting for Spark's stop() or SIGTERM.
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.state.name == "EMPTY"
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    assert [(tp.partition, tp.offset) for tp in committed[group].result(10).topic_partitions] == [
        (0, 5)
    ]
    assert stream.latest_offset(first, None) is first  # later calls are harmless


def test_revocation_waits_for_the_batch_holding_the_partitions(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(50 * 2), 2)
    stream = make_stream(streams, bootstrap_servers, topic, group, tmp_path / "ledger")
    in_flight = stream.latest_offset(BatchOffset.initial().to_json(), None)  # batch 0 running
    config = parse_options(
        {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic, "group.id": group}
    ).member_config()
    config.update({"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"})
    newcomer = GroupMember(config, [topic]).start()
    try:
        # The first member is asked to give a partition up; it must hold on until batch 0
        # is committed.
        deadline = time.monotonic() + 60
        while stream.metrics.revocations == 0:
            assert time.monotonic() < deadline, "no revocation happened"
            time.sleep(0.05)
        held_for = 1.0
        time.sleep(held_for)  # the batch "runs" for a second; the newcomer must not start
        assert newcomer.assignment == frozenset()
        finished = threading.Event()

        def spark_calls_latest_offset() -> None:
            stream.latest_offset(in_flight, None)  # safe point: commits batch 0
            finished.set()

        threading.Thread(target=spark_calls_latest_offset, daemon=True).start()
        assert finished.wait(30)
        deadline = time.monotonic() + 60
        while not newcomer.assignment:
            assert time.monotonic() < deadline, "the newcomer never got a partition"
            time.sleep(0.05)
        moved = newcomer.assignment
        # The newcomer resumes exactly where batch 0 ended.
        assert newcomer.committed(moved) == {tp: 50 for tp in moved}
        assert stream.metrics.last_barrier_wait_s >= held_for
        assert stream.metrics.failed_commits == 0
    finally:
        newcomer.close()


def test_lost_partitions_are_never_committed(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(5 * 2), 2)
    stream = make_stream(streams, bootstrap_servers, topic, group, None)
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    member = stream.ensure_started()
    lost = frozenset({TopicPartition(topic, 0)})
    # What the member does when librdkafka reports the assignment lost.
    member._assignment = member.assignment - lost
    stream.on_lost(lost)
    stream.latest_offset(planned, None)
    assert member.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)]) == {
        TopicPartition(topic, 1): 5
    }
    assert stream.metrics.lost_partitions == 1


def test_revocation_during_planning_leaves_the_revoked_partitions_out(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    """A revocation that lands while a batch is being planned must either be in that plan's
    exclusions or see the batch and wait for it; never neither (found in a handover test)."""
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(5 * 2), 2)
    stream = make_stream(streams, bootstrap_servers, topic, f"g-{uuid.uuid4().hex[:8]}", None)
    first = stream.latest_offset(BatchOffset.initial().to_json(), None)
    assert stream.latest_offset(first, None) is first  # batch 0 committed, nothing new
    produce_ids(bootstrap_servers, topic, range(5 * 2), 2)
    revoked = frozenset({TopicPartition(topic, 0)})
    fetch_ends = stream._log_ends.fetch
    barrier_returned = threading.Event()

    member = stream.ensure_started()

    def revoke() -> None:  # as librdkafka's callback runs it: on the member's owner thread
        member.call(lambda consumer: stream.on_revoked(revoked, member.serve))
        barrier_returned.set()

    def ends_with_a_revocation_meanwhile(positions):  # type: ignore[no-untyped-def]
        ends = fetch_ends(positions)
        threading.Thread(target=revoke, daemon=True).start()
        assert barrier_returned.wait(10)  # batch 0 is committed: nothing to wait for
        return ends

    stream._log_ends.fetch = ends_with_a_revocation_meanwhile  # type: ignore[method-assign]
    planned = BatchOffset.from_json(stream.latest_offset(first, None))
    assert planned.ends() == {TopicPartition(topic, 1): 10}


def test_commit_refused_for_a_fenced_member_is_reported_not_ignored(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path, caplog
) -> None:
    """Kafka's refusal is simulated at the client (the commit call raises UNKNOWN_MEMBER_ID
    as librdkafka does), so the decision is tested on its own; tests/unit/test_fencing.py
    shows the real refusal by freezing a member."""
    from confluent_kafka import KafkaError, KafkaException

    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(5 * 1), 1)
    stream = make_stream(streams, bootstrap_servers, topic, group, tmp_path / "ledger")
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    member = stream.ensure_started()
    real_call = member.call

    def call(fn, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
        if getattr(fn, "__name__", "") == "commit":
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        return real_call(fn, timeout_s)

    member.call = call  # type: ignore[method-assign]
    with caplog.at_level("ERROR", logger="spark_groups"):
        stream.latest_offset(planned, None)
    assert stream.metrics.failed_commits == 1
    assert any("refused the offset commit" in r.getMessage() for r in caplog.records)
    # A fenced member's offsets reach neither Kafka nor the ledger.
    assert OffsetLedger(str(tmp_path / "ledger"), group).latest_positions() == {}
    member.call = real_call  # type: ignore[method-assign]
    assert member.committed([TopicPartition(topic, 0)]) == {}


def test_a_commit_refused_mid_rebalance_is_made_again_under_the_new_generation(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    """Between the two rebalances of a cooperative revocation Kafka answers a commit from a
    member that keeps its partitions with ILLEGAL_GENERATION: the group moved on while the
    commit was in flight. That is not a fence: once the member has the new generation the
    batch is committed, to Kafka and the ledger, with no gap. (Seen on Kafka in the handover
    test; simulated here: the first commit is refused and the generation moves on.)"""
    from confluent_kafka import KafkaError, KafkaException

    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    produce_ids(bootstrap_servers, topic, range(5 * 1), 1)
    stream = make_stream(streams, bootstrap_servers, topic, group, tmp_path / "ledger")
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    member = stream.ensure_started()
    real_call = member.call
    refused: list[int] = []

    def rebalance_completes() -> None:
        member._generation += 1

    def call(fn, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
        if getattr(fn, "__name__", "") == "commit" and not refused:
            refused.append(member.generation)
            threading.Timer(0.3, rebalance_completes).start()
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION))
        return real_call(fn, timeout_s)

    member.call = call  # type: ignore[method-assign]
    stream.latest_offset(planned, None)
    member.call = real_call  # type: ignore[method-assign]
    assert refused, "the commit was never refused"
    assert stream.metrics.failed_commits == 0
    assert member.committed([tp]) == {tp: 5}
    stream._behind.wait()  # the ledger's append lands behind the safe point
    assert OffsetLedger(str(tmp_path / "ledger"), group).latest_positions() == {tp: 5}


def test_subscribe_pattern_reads_every_matching_topic(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first, second, other = make_topic(1, prefix), make_topic(2, prefix), make_topic(1, "other")
    for topic, partitions in ((first, 1), (second, 2), (other, 1)):
        produce_ids(bootstrap_servers, topic, range(3 * partitions), partitions)
    opts = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribePattern": f"{prefix}_.*",
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "startingOffsets": "earliest",
        **FAST,
    }
    stream = GroupStream(parse_options(opts))
    streams.append(stream)
    stream.prepare_available_now()
    planned = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    assert planned.ends() == {
        TopicPartition(first, 0): 3,
        TopicPartition(second, 0): 3,
        TopicPartition(second, 1): 3,
    }


def test_rebalance_history_records_assignments_and_revocations(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    from spark_groups.group.history import history_path, read_history

    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(5 * 2), 2)
    ledger = tmp_path / "ledger"
    stream = make_stream(streams, bootstrap_servers, topic, group, ledger)
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    member = stream.ensure_started()
    # Batch 0 is open: the revocation waits until Spark's next call commits it.
    revocation = threading.Thread(  # as librdkafka runs it: on the member's owner thread
        target=member.call,
        args=(lambda c: stream.on_revoked(frozenset({TopicPartition(topic, 1)}), member.serve),),
    )
    revocation.start()
    deadline = time.monotonic() + 10
    while not revoking(stream, TopicPartition(topic, 1)):  # the revocation has begun
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stream.latest_offset(planned, None)
    revocation.join(10)
    assert not revocation.is_alive()
    stream.stop()  # flushes the queued events
    rows = read_history(history_path(str(ledger))).to_pylist()
    assigned = [r for r in rows if r["event"] == "assigned"]
    assert {(r["topic"], r["partition"]) for r in assigned} == {(topic, 0), (topic, 1)}
    assert all(r["member_id"] == member.member_id and r["group_id"] == group for r in rows)
    (revoked,) = [r for r in rows if r["event"] == "revoked"]
    assert (revoked["partition"], revoked["waited_for_batch"]) == (1, 0)
    assert revoked["barrier_wait_ms"] >= 0


def test_at_most_once_commits_a_batch_before_it_runs(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(7 * 1), 1)
    stream = make_stream(
        streams, bootstrap_servers, topic, f"g-{uuid.uuid4().hex[:8]}", None,
        deliveryGuarantee="at-most-once",
    )  # fmt: skip
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    member = stream.ensure_started()
    # Committed as soon as it was planned, before Spark ran it.
    assert member.committed([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 7}
    assert stream.planned_here(BatchOffset.from_json(planned).batch)
    assert not stream.planned_here(99)  # a replay from a checkpoint is skipped by the source
    # A revocation does not wait for the running batch: its offsets are already committed.
    started = time.monotonic()
    stream.on_revoked(frozenset({TopicPartition(topic, 0)}), lambda s: time.sleep(s))
    assert time.monotonic() - started < 1


def test_a_batch_near_the_rebalance_timeout_is_warned_about(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, caplog
) -> None:
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(3 * 1), 1)
    stream = make_stream(
        streams, bootstrap_servers, topic, f"g-{uuid.uuid4().hex[:8]}", None,
        **{"kafka.max.poll.interval.ms": "7000"},  # a revocation may wait 2 s: warn past 1 s
    )  # fmt: skip
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    time.sleep(1.2)  # the batch "runs" this long before Spark's next call
    with caplog.at_level("WARNING", logger="spark_groups"):
        stream.latest_offset(planned, None)
    assert any("more than half of the rebalance timeout" in r.getMessage() for r in caplog.records)
    assert stream.metrics.extra["slow_batches"] == 1


def test_a_new_owner_resumes_from_the_sink_when_it_is_ahead(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    from spark_groups.sink import DeltaSink

    from sink_support import SCHEMA, plan, rows, write_task

    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 2), 2)
    sink_table = tmp_path / "sink"
    # The sink committed partition 0 up to 7 (a crash before the source's safe point).
    files = write_task(sink_table, [rows(0, range(0, 7), topic=topic)])
    DeltaSink(str(sink_table), group).commit(plan(0, {0: (0, 7)}, topic=topic), files, SCHEMA)
    stream = make_stream(
        streams,
        bootstrap_servers,
        topic,
        group,
        tmp_path / "ledger",
        **{"sink.table": str(sink_table)},
    )
    first = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert {r.topic_partition: (r.from_offset, r.until_offset) for r in first.ranges} == {
        p0: (7, 10),
        p1: (0, 10),
    }
    # Kafka and the ledger were brought up to the sink before the batch ran.
    assert stream.ensure_started().committed([p0, p1]) == {p0: 7}
    ledger = OffsetLedger(str(tmp_path / "ledger"), group)
    assert ledger.latest_positions([p0, p1]) == {p0: 7}
    assert [r["batch"] for r in ledger.history().to_pylist()] == [-1]


def test_partitions_created_while_the_query_runs_start_at_earliest(
    bootstrap_servers: str, make_topic: Callable[..., str], streams
) -> None:
    """startingOffsets=latest applies to the partitions of the query's first plan (their start
    is committed at once); a partition that appears later starts at earliest, as with Spark's
    kafka source, so records written to it before the group assigned it are not skipped."""
    prefix = f"grow{uuid.uuid4().hex[:6]}"
    first = make_topic(1, prefix)
    produce_ids(bootstrap_servers, first, range(5 * 1), 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    opts = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribePattern": f"{prefix}_.*",
        "group.id": group,
        "startingOffsets": "latest",
        "kafka.topic.metadata.refresh.interval.ms": "1000",
        **FAST,
    }
    stream = GroupStream(parse_options(opts))
    streams.append(stream)
    initial = BatchOffset.initial().to_json()
    assert stream.latest_offset(initial, None) is initial  # latest: nothing to read
    member = stream.ensure_started()
    assert member.committed([TopicPartition(first, 0)]) == {TopicPartition(first, 0): 5}
    second = make_topic(2, prefix)
    produce_ids(bootstrap_servers, second, range(3 * 2), 2)  # before the group knows the topic
    deadline = time.monotonic() + 90
    while True:
        planned = stream.latest_offset(initial, None)
        if planned is not initial:
            break
        assert time.monotonic() < deadline, "the new topic's partitions were never planned"
        time.sleep(0.5)
    assert {
        (r.topic_partition, r.from_offset, r.until_offset)
        for r in BatchOffset.from_json(planned).ranges
    } == {(TopicPartition(second, 0), 0, 3), (TopicPartition(second, 1), 0, 3)}
