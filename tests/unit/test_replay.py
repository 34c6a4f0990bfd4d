"""A batch Spark replays after a restart reads only what is still this member's
(``spark_groups.group.replay``): the rule alone, then GroupStream on a real broker with the
replay notice the delta-group sink plans from."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient

from spark_groups.group.replay import UNNAMED, decide
from spark_groups.group.stream import GroupStream
from spark_groups.offsets import BatchOffset, Handover, OffsetRange, TopicPartition
from spark_groups.options import parse_options
from spark_groups.sink.delta_arbiter import for_source
from spark_groups.sink.plan import read_batch_plan
from spark_groups.storage.replays import notice_path

from support.broker import committed_offsets, produce_ids

T = "t"
P0, P1, P2, P3 = (TopicPartition(T, p) for p in range(4))


def logged_batch() -> BatchOffset:
    return BatchOffset.of(
        7,
        [OffsetRange(T, p, 100, 200) for p in range(4)],
        [Handover(T, 3, 40, 100, "svc-a")],  # p3's logged range began after another consumer
    )


def no_handover(_: OffsetRange) -> None:
    return None


def test_each_row_of_the_rule() -> None:
    d = decide(
        logged_batch(),
        frozenset({P1, P2, P3}),  # P0 went to another member
        {P1: 250, P2: 130, P3: 100},
        no_handover,
    )
    assert d.left_out == {P0: "not assigned", P1: "committed to 250"}
    assert d.trimmed == {P2: 130}
    assert d.read.batch == 7
    assert d.read.ranges == (OffsetRange(T, 2, 130, 200), OffsetRange(T, 3, 100, 200))
    # P2's table gap [100, 130) is another consumer's; P3 keeps the handover it was logged with.
    assert d.read.outside == (
        Handover(T, 2, 100, 130, UNNAMED),
        Handover(T, 3, 40, 100, "svc-a"),
    )
    assert d.changed and "p0" not in d.describe() and "left out (not assigned)" in d.describe()


def test_a_trimmed_range_names_who_committed_and_keeps_the_older_gap() -> None:
    def named(r: OffsetRange) -> Handover | None:
        return (
            Handover(T, r.partition, 100, r.from_offset, "svc-b") if r.from_offset == 150 else None
        )

    d = decide(logged_batch(), frozenset({P3}), {P3: 150}, named)
    assert d.read.ranges == (OffsetRange(T, 3, 150, 200),)
    # One gap in the table from where it stood (40) to 150: both handovers together.
    assert d.read.outside == (Handover(T, 3, 40, 150, "svc-b"),)


def test_nothing_moved_reads_the_batch_as_logged() -> None:
    everything = frozenset({P0, P1, P2, P3})
    d = decide(logged_batch(), everything, {P0: 100, P1: 90}, no_handover)
    assert not d.changed
    assert d.read == logged_batch()


def test_a_range_read_under_an_old_claim_is_left_out_with_or_without_a_notice() -> None:
    """With sink.table the restarted member claimed its partitions anew: what the batch
    read under the old token the sink leaves out, so the replay reads none of it, and the
    batch read as logged (no notice) drops it too; the rest keeps its (current) claim."""
    logged = BatchOffset.of(
        7, [OffsetRange(T, p, 100, 200) for p in range(3)], (), {P0: 11, P1: 11, P2: 12}
    )
    d = decide(logged, frozenset({P0, P1, P2}), {}, no_handover, {P0: 99, P1: 99, P2: 12})
    assert d.left_out == {
        P0: "claimed anew since it was planned",
        P1: "claimed anew since it was planned",
    }
    assert d.fenced == {P0, P1} and not d.changed  # nothing another consumer did
    assert d.read.ranges == (OffsetRange(T, 2, 100, 200),) and d.read.claim_map() == {P2: 12}
    assert d.as_logged().ranges == d.read.ranges
    assert decide(logged, frozenset({P0, P1, P2}), {}, no_handover, {}).read.ranges == ()


# ---------------------------------------------------------------- GroupStream, real broker


def stream_of(
    streams: list[GroupStream], servers: str, topic: str, group: str, **extra: str
) -> GroupStream:
    options = parse_options(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "group.id": group,
            "startingOffsets": "earliest",
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "500",
            **extra,
        }
    )
    stream = GroupStream(options, for_source(options))
    streams.append(stream)
    return stream


def another_consumer_commits(servers: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """What a plain consumer that took the partitions over leaves behind (the group is empty
    now, so the offsets are set the way kafka-consumer-groups would)."""
    admin = AdminClient({"bootstrap.servers": servers})
    request = ConsumerGroupTopicPartitions(
        group,
        [KafkaPartition(tp.topic, tp.partition, o, metadata="svc-x") for tp, o in offsets.items()],
    )
    admin.alter_consumer_group_offsets([request])[group].result(timeout=30)


def crashed_mid_batch(
    streams: list[GroupStream], servers: str, topic: str, group: str, checkpoint: Path
) -> BatchOffset:
    """A member plans batch 0 and stops before Spark finished it (nothing committed), with
    the batch in the query's offset log as Spark would have written it."""
    first = stream_of(streams, servers, topic, group, checkpointLocation=str(checkpoint))
    logged = BatchOffset.from_json(first.latest_offset(BatchOffset.initial().to_json(), None))
    first.stop()
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
        + json.dumps(logged.to_json())
        + "\n"
    )
    assert committed_offsets(servers, group, topic, 3) == {}
    return logged


def test_the_replay_leaves_out_what_another_consumer_processed_and_the_sink_plans_from_it(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    topic, group = make_topic(3), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 3), 3)
    checkpoint = tmp_path / "cp"
    logged = crashed_mid_batch(streams, bootstrap_servers, topic, group, checkpoint)
    assert logged.ends() == {TopicPartition(topic, p): 10 for p in range(3)}
    tp0, tp1, tp2 = (TopicPartition(topic, p) for p in range(3))
    # While the query was down, a plain consumer processed all of p0 and p1 up to 7.
    another_consumer_commits(bootstrap_servers, group, {tp0: 10, tp1: 7})

    restarted = stream_of(
        streams, bootstrap_servers, topic, group, checkpointLocation=str(checkpoint)
    )
    assert not restarted.planned_here(0)
    read = restarted.batch_to_read(logged)
    assert read.ranges == (OffsetRange(topic, 1, 7, 10), OffsetRange(topic, 2, 0, 10))
    (handover,) = read.outside
    assert (handover.topic_partition, handover.since, handover.until) == (tp1, 0, 7)
    assert "svc-x" in handover.by  # who processed [0, 7): the other consumer's commit metadata
    assert restarted.batch_to_read(logged) == read  # Spark asking again gets the same
    assert (Path(notice_path(str(checkpoint), group, 0))).exists()

    # The sink plans the batch as read: it claims nothing of p0, and p1's gap is explained.
    plan = read_batch_plan(str(checkpoint), 0, None, group)
    assert dict(plan.ranges) == {
        tp1: OffsetRange(topic, 1, 7, 10),
        tp2: OffsetRange(topic, 2, 0, 10),
    }
    assert plan.outside[tp1] == handover
    # Another group's sink (or none named) plans from the offset log as before.
    assert set(read_batch_plan(str(checkpoint), 0, None, "other").ranges) == {tp0, tp1, tp2}

    # The safe point commits what was read; p0 stays where the other consumer left it.
    assert restarted.latest_offset(logged.to_json(), None) is not None
    assert committed_offsets(bootstrap_servers, group, topic, 3) == {0: 10, 1: 10, 2: 10}


def test_without_the_checkpoint_the_replay_reads_as_logged_and_says_why(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, group = make_topic(3), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 3), 3)
    logged = crashed_mid_batch(streams, bootstrap_servers, topic, group, tmp_path / "cp")
    another_consumer_commits(bootstrap_servers, group, {TopicPartition(topic, 0): 10})
    restarted = stream_of(streams, bootstrap_servers, topic, group)  # no checkpointLocation
    with caplog.at_level(logging.WARNING, logger="spark_groups"):
        assert restarted.batch_to_read(logged) == logged
    assert "Give the source the option checkpointLocation" in caplog.text
    assert f"{topic}-0 left out (committed to 10)" in caplog.text


def test_a_finished_replay_is_committed_when_the_member_leaves(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    """Spark finished the replay (its commit-log entry exists) and the member leaves before
    the next trigger: the batch read is committed, found in the checkpoint by the offsets
    Spark logged, not by the smaller batch read."""
    topic, group = make_topic(3), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 3), 3)
    checkpoint = tmp_path / "cp"
    logged = crashed_mid_batch(streams, bootstrap_servers, topic, group, checkpoint)
    another_consumer_commits(bootstrap_servers, group, {TopicPartition(topic, 1): 4})
    restarted = stream_of(
        streams, bootstrap_servers, topic, group, checkpointLocation=str(checkpoint)
    )
    read = restarted.batch_to_read(logged)
    assert read != logged and read.ranges[1] == OffsetRange(topic, 1, 4, 10)
    (checkpoint / "commits").mkdir()
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    restarted.stop()
    assert committed_offsets(bootstrap_servers, group, topic, 3) == {0: 10, 1: 10, 2: 10}


def test_a_later_run_that_reads_the_batch_as_logged_replaces_the_earlier_notice(
    bootstrap_servers: str, make_topic: Callable[..., str], streams, tmp_path: Path
) -> None:
    """A first replay left a partition out and crashed before the batch finished; the next
    replay owns everything and nobody committed meanwhile, so it reads the batch as logged:
    the sink must plan what that run read, not what the earlier one wrote down."""
    from spark_groups.storage.replays import ReplayNotice, write_notice

    topic, group = make_topic(3), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 3), 3)
    checkpoint = tmp_path / "cp"
    logged = crashed_mid_batch(streams, bootstrap_servers, topic, group, checkpoint)
    earlier = BatchOffset.of(logged.batch, logged.ranges[1:])
    write_notice(str(checkpoint), group, ReplayNotice(logged, earlier))
    assert set(read_batch_plan(str(checkpoint), 0, None, group).ranges) == {
        r.topic_partition for r in earlier.ranges
    }
    restarted = stream_of(
        streams, bootstrap_servers, topic, group, checkpointLocation=str(checkpoint)
    )
    assert restarted.batch_to_read(logged) == logged
    plan = read_batch_plan(str(checkpoint), 0, None, group)
    assert dict(plan.ranges) == {r.topic_partition: r for r in logged.ranges}
