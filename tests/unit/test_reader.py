"""The executor read path: exact ranges, columns, termination, data loss, the consumer pool.

Runs against the suite's broker (``bootstrap_servers``: Apache Kafka by default) and, for
Kafka behaviour that Tansu lacks (out-of-range errors, transaction markers), librdkafka's
mock cluster.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message, Producer

from spark_groups.embedded import free_port
from spark_groups.errors import BrokerUnreachableError, DataLossError, SparkGroupsError
from spark_groups.kafka import client as kafka_client
from spark_groups.offsets import OffsetRange
from spark_groups.read import columns, loop, native, pool, reader
from spark_groups.read.reader import read_range, read_ranges
from spark_groups.read.schema import arrow_schema

from support.broker import broker_kind

SECRET = "hunter2-do-not-show"


@pytest.fixture(autouse=True)
def _empty_pool() -> Iterator[None]:
    """Every test starts and ends without pooled consumers (they would outlive brokers)."""
    reader.close_cached_consumers()
    yield
    reader.close_cached_consumers()


@pytest.fixture
def created(monkeypatch) -> list[dict[str, Any]]:
    """The configurations of every consumer either read path creates during the test."""
    configs: list[dict[str, Any]] = []
    real, real_native = kafka_client.Consumer, native.NativeConsumer

    def counting(config: dict[str, Any]) -> Any:
        configs.append(config)
        return real(config)

    def counting_native(config: dict[str, Any]) -> Any:
        configs.append(config)
        return real_native(config)

    monkeypatch.setattr(kafka_client, "Consumer", counting)
    monkeypatch.setattr(native, "NativeConsumer", counting_native)
    return configs


def produce_batches(
    servers: str, topic: str, sizes: list[int], partition: int = 0, start: int = 0
) -> list[dict[str, Any]]:
    """Produce ``sizes`` as separate record batches (flush between); return what was sent.

    Record ``i`` has value ``v<i>``, no key when ``i % 3 == 0`` (else ``k<i>``), one header
    when ``i % 5 == 0``, and CreateTime ``1_700_000_000_000 + i``.
    """
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 100})
    sent = []
    i = start
    for size in sizes:
        for _ in range(size):
            record = {
                "key": None if i % 3 == 0 else b"k%d" % i,
                "value": b"v%d" % i,
                "headers": [("h", b"%d" % i)] if i % 5 == 0 else None,
                "timestamp": 1_700_000_000_000 + i,
            }
            producer.produce(topic, partition=partition, **record)
            sent.append(record)
            i += 1
        assert producer.flush(30) == 0
    return sent


def read_all(servers: str, rng: OffsetRange, **kwargs: Any) -> list[pa.RecordBatch]:
    kwargs.setdefault("include_headers", False)
    kwargs.setdefault("poll_timeout_s", 30.0)
    return list(read_range({"bootstrap.servers": servers}, rng, **kwargs))


def rows_of(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [row for b in batches for row in b.to_pylist()]


def read_many(servers: str, ranges: list[OffsetRange], **kwargs: Any) -> list[pa.RecordBatch]:
    kwargs.setdefault("include_headers", False)
    kwargs.setdefault("poll_timeout_s", 30.0)
    return list(read_ranges({"bootstrap.servers": servers}, ranges, **kwargs))


def offsets_by_partition(batches: list[pa.RecordBatch]) -> dict[tuple[str, int], list[int]]:
    """Each partition's offsets in the order the batches hold them."""
    out: dict[tuple[str, int], list[int]] = {}
    for row in rows_of(batches):
        out.setdefault((row["topic"], row["partition"]), []).append(row["offset"])
    return out


def mock_topic() -> str:
    """A fresh topic name on the mock cluster, which creates a topic of 4 partitions on its
    first use (it serves no CreateTopics)."""
    return f"mock-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ exact ranges


def test_reads_exactly_the_range_across_record_batches(bootstrap_servers, make_topic, read_path):
    topic = make_topic(partitions=1)
    # Batches of different sizes, single-record ones included: Tansu's ListOffsets would say
    # the log ends at 109 (base of the last batch + 1); it ends at 139.
    sent = produce_batches(bootstrap_servers, topic, [50, 50, 7, 1, 1, 30])
    assert len(sent) == 139
    for start, until in [
        (0, 139),
        (0, 1),
        (49, 51),
        (100, 108),
        (107, 109),
        (108, 139),
        (138, 139),
        (3, 120),
    ]:
        batches = read_all(
            bootstrap_servers, OffsetRange(topic, 0, start, until), max_batch_rows=16
        )
        assert all(b.schema == arrow_schema(False) for b in batches)
        assert all(0 < b.num_rows <= 16 for b in batches)
        rows = rows_of(batches)
        assert [r["offset"] for r in rows] == list(range(start, until)), (start, until)
        assert [r["value"] for r in rows] == [s["value"] for s in sent[start:until]]
        assert [r["key"] for r in rows] == [s["key"] for s in sent[start:until]]
        assert {r["topic"] for r in rows} == {topic}
        assert {r["partition"] for r in rows} == {0}


def test_reads_a_partition_other_than_zero(bootstrap_servers, make_topic, read_path):
    topic = make_topic(partitions=3)
    produce_batches(bootstrap_servers, topic, [5], partition=0)
    sent = produce_batches(bootstrap_servers, topic, [4, 3], partition=2)
    rows = rows_of(read_all(bootstrap_servers, OffsetRange(topic, 2, 1, 7)))
    assert [(r["partition"], r["offset"], r["value"]) for r in rows] == [
        (2, i, s["value"]) for i, s in enumerate(sent) if 1 <= i < 7
    ]


def test_columns_null_keys_values_headers_and_timestamps(bootstrap_servers, make_topic, read_path):
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    producer.produce(topic, partition=0, key=None, value=b"a", timestamp=1_700_000_000_123)
    producer.produce(
        topic,
        partition=0,
        key=b"k",
        value=None,
        timestamp=1_700_000_000_124,
        headers=[("x", b"1"), ("y", None), ("x", b"2")],
    )
    producer.produce(topic, partition=0, key=b"", value=b"", timestamp=1_700_000_000_125)
    assert producer.flush(30) == 0

    with_headers = read_all(bootstrap_servers, OffsetRange(topic, 0, 0, 3), include_headers=True)
    assert with_headers[0].schema == arrow_schema(True)
    rows = rows_of(with_headers)
    assert [(r["key"], r["value"]) for r in rows] == [(None, b"a"), (b"k", None), (b"", b"")]
    # Like Spark's kafka source: null (not an empty list) for a record without headers.
    assert [r["headers"] for r in rows] == [
        None,
        [{"key": "x", "value": b"1"}, {"key": "y", "value": None}, {"key": "x", "value": b"2"}],
        None,
    ]
    assert [r["timestamp"] for r in rows] == [
        datetime.fromtimestamp(1_700_000_000.123 + i / 1000, tz=UTC) for i in range(3)
    ]
    assert {r["timestampType"] for r in rows} == {0}  # CreateTime

    without = read_all(bootstrap_servers, OffsetRange(topic, 0, 0, 3), include_headers=False)
    assert without[0].schema == arrow_schema(False)
    assert "headers" not in without[0].schema.names


def test_headers_column_when_no_record_has_headers(bootstrap_servers, make_topic, read_path):
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(3):
        producer.produce(topic, partition=0, value=b"%d" % i)
    assert producer.flush(30) == 0
    (batch,) = read_all(bootstrap_servers, OffsetRange(topic, 0, 0, 3), include_headers=True)
    assert batch.column("headers").null_count == 3
    assert batch.schema == arrow_schema(True)


def test_timestamp_types_map_to_kafka_ids():
    """librdkafka's types (0 none, 1 create, 2 log-append) become Kafka's (-1, 0, 1); a record
    without a timestamp gets a null one. Neither broker here writes LogAppendTime, so this
    drives the column builder with constructed messages."""
    rng = OffsetRange("t", 3, 10, 14)
    msgs = [
        Message(topic="t", partition=3, offset=10, value=b"a", timestamp=(1, 1000)),
        Message(topic="t", partition=3, offset=11, value=b"b", timestamp=(2, 2000)),
        Message(topic="t", partition=3, offset=12, value=b"c", timestamp=(0, -1)),
        Message(topic="t", partition=3, offset=13, value=b"d", timestamp=(1, 4000)),
    ]
    built = columns.Columns(include_headers=False)
    built.add(msgs[:2], pa.array([10, 11]).to_numpy(), 0)
    built.add(msgs[2:], pa.array([12, 13]).to_numpy(), 0)
    batch = built.to_batch((rng,), arrow_schema(False), columns.Constants())
    assert batch.column("timestampType").to_pylist() == [0, 1, -1, 0]
    assert batch.column("timestamp").to_pylist() == [
        datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC),
        None,
        datetime(1970, 1, 1, 0, 0, 4, tzinfo=UTC),
    ]
    assert batch.column("offset").to_pylist() == [10, 11, 12, 13]
    assert batch.column("partition").to_pylist() == [3] * 4

    uniform = columns.Columns(include_headers=False)
    uniform.add(
        [Message(topic="t", partition=3, offset=o, timestamp=(2, o)) for o in (10, 11)],
        pa.array([10, 11]).to_numpy(),
        0,
    )
    batch = uniform.to_batch((rng,), arrow_schema(False), columns.Constants())
    assert batch.column("timestampType").to_pylist() == [1, 1]


def test_empty_range_creates_no_consumer(bootstrap_servers, created, read_path):
    assert read_all(bootstrap_servers, OffsetRange("any", 0, 5, 5)) == []
    assert read_all(bootstrap_servers, OffsetRange("any", 0, 7, 5)) == []
    assert created == []


# ------------------------------------------------------------------ termination and data loss


def test_range_beyond_the_log_end_raises_data_loss_after_the_poll_timeout(
    bootstrap_servers, make_topic, caplog, read_path
):
    topic = make_topic(partitions=1)
    produce_batches(bootstrap_servers, topic, [10])
    config = {"bootstrap.servers": bootstrap_servers, "sasl.password": SECRET}
    started = time.monotonic()
    with (
        caplog.at_level(logging.DEBUG, logger="spark_groups"),
        pytest.raises(DataLossError) as info,
    ):
        list(
            read_range(
                config, OffsetRange(topic, 0, 8, 15), include_headers=False, poll_timeout_s=1.0
            )
        )
    assert time.monotonic() - started < 15
    text = str(info.value)
    assert f"{topic}-0" in text and "[10, 15)" in text and "[8, 15)" in text
    assert SECRET not in text
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_range_beyond_the_log_end_without_fail_on_data_loss(
    bootstrap_servers, make_topic, caplog, read_path
):
    topic = make_topic(partitions=1)
    produce_batches(bootstrap_servers, topic, [10])
    with caplog.at_level(logging.WARNING, logger="spark_groups.read.reader"):
        rows = rows_of(
            read_all(
                bootstrap_servers,
                OffsetRange(topic, 0, 8, 15),
                poll_timeout_s=1.0,
                fail_on_data_loss=False,
            )
        )
    assert [r["offset"] for r in rows] == [8, 9]
    assert any("[10, 15)" in r.getMessage() for r in caplog.records)


def test_offset_out_of_range_on_kafka_fails_fast(mock_servers, read_path):
    topic = f"oor-{uuid.uuid4().hex[:8]}"
    produce_batches(mock_servers, topic, [10])
    started = time.monotonic()
    with pytest.raises(DataLossError, match=r"\[500, 510\)"):
        read_all(mock_servers, OffsetRange(topic, 0, 500, 510), poll_timeout_s=60.0)
    assert time.monotonic() - started < 20  # the broker's error, not the 60 s deadline
    assert (
        read_all(
            mock_servers,
            OffsetRange(topic, 0, 500, 510),
            poll_timeout_s=60.0,
            fail_on_data_loss=False,
        )
        == []
    )


class _Watermarks:
    """A consumer whose broker reports the given watermarks, and nothing else."""

    def __init__(self, low: int, high: int) -> None:
        self.marks = (low, high)

    def get_watermark_offsets(self, tp: Any, **kwargs: Any) -> tuple[int, int]:
        return self.marks


class _FakeRead(loop.TaskRead):
    """A TaskRead of one range whose broker reports the given watermarks."""

    def __init__(self, rng: OffsetRange, low: int, high: int, fail: bool) -> None:
        entry = pool.PooledConsumer(key=(os.getpid(), ()), consumer=_Watermarks(low, high))
        super().__init__(entry, {}, (rng,), False, 100, 1.0, fail)
        self.state = self.states[0]


def test_offsets_deleted_by_retention():
    """The decision on its own (test_deleted_records_* read really deleted records)."""
    rng = OffsetRange("t", 0, 100, 200)
    fails = _FakeRead(rng, low=150, high=300, fail=True)
    with pytest.raises(DataLossError, match=r"records \[100, 150\) of t-0"):
        fails._out_of_range(fails.state)

    skip = _FakeRead(rng, low=150, high=300, fail=False)
    assert skip._out_of_range(skip.state) == 150  # read on from the new log start
    state = skip.state
    assert (state.next_offset, state.done) == (150, False)
    assert skip.remaining == 50

    gone = _FakeRead(rng, low=250, high=300, fail=False)
    assert gone._out_of_range(gone.state) is None
    assert gone.state.done and gone.active == 0 and gone.remaining == 0

    beyond = _FakeRead(OffsetRange("t", 0, 400, 410), low=0, high=300, fail=True)
    with pytest.raises(DataLossError, match=r"\[400, 410\)"):
        beyond._out_of_range(beyond.state)


class _ScriptedConsumer:
    """Hands out the given chunks of records, then nothing: no end-of-partition event, as on
    a log that goes on growing."""

    def __init__(self, chunks: list[list[Message]]) -> None:
        self.chunks = list(chunks)

    def incremental_assign(self, partitions: Any) -> None:
        pass

    def incremental_unassign(self, partitions: Any) -> None:
        pass

    def consume(self, num: int, timeout: float) -> list[Message]:
        return self.chunks.pop(0) if self.chunks else []

    def get_watermark_offsets(self, tp: Any, **kwargs: Any) -> tuple[int, int]:
        return 0, 100


def scripted_read(ranges: list[OffsetRange], chunks: list[list[Message]]) -> list[pa.RecordBatch]:
    entry = pool.PooledConsumer(key=(os.getpid(), ()), consumer=_ScriptedConsumer(chunks))
    task = loop.TaskRead(entry, {}, ranges, False, 100, 1.0, True)
    return list(task.run())


def records(partition: int, *offsets: int) -> list[Message]:
    return [
        Message(topic="t", partition=partition, offset=o, value=b"%d" % o, timestamp=(1, o))
        for o in offsets
    ]


def test_a_record_past_the_end_completes_a_range_ending_in_a_gap():
    """Offset 5 holds no record (a marker, compacted away) and the log goes on: record 7
    completes [2, 6) at once, with no end-of-partition event and no stall (the poll timeout is
    1 s: a stalled range would raise DataLossError)."""
    started = time.monotonic()
    batches = scripted_read([OffsetRange("t", 0, 2, 6)], [records(0, 2, 3, 4), records(0, 7, 8)])
    assert offsets_by_partition(batches) == {("t", 0): [2, 3, 4]}
    # The slow path (offsets not consecutive in the chunk), beside another range.
    batches = scripted_read(
        [OffsetRange("t", 0, 2, 6), OffsetRange("t", 1, 0, 3)],
        [records(0, 2, 3) + records(1, 0, 1), records(0, 4, 7, 8) + records(1, 2)],
    )
    assert offsets_by_partition(batches) == {("t", 0): [2, 3, 4], ("t", 1): [0, 1, 2]}
    assert time.monotonic() - started < 1.0


def test_range_ending_in_a_transaction_marker_terminates(mock_servers, read_path):
    """Offset 5 is the commit marker: no record has it, the read must still end at 6."""
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": mock_servers, "transactional.id": topic})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, partition=0, value=b"t%d" % i)
    producer.commit_transaction(10)

    started = time.monotonic()
    rows = rows_of(read_all(mock_servers, OffsetRange(topic, 0, 0, 6), poll_timeout_s=30.0))
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4]
    rows = rows_of(read_all(mock_servers, OffsetRange(topic, 0, 3, 6), poll_timeout_s=30.0))
    assert [r["offset"] for r in rows] == [3, 4]
    assert time.monotonic() - started < 10  # ended on the end-of-partition event

    produce_batches(mock_servers, topic, [3])  # offsets 6, 7, 8 after the marker
    rows = rows_of(read_all(mock_servers, OffsetRange(topic, 0, 2, 6), poll_timeout_s=30.0))
    assert [r["offset"] for r in rows] == [2, 3, 4]
    rows = rows_of(read_all(mock_servers, OffsetRange(topic, 0, 4, 8), poll_timeout_s=30.0))
    assert [r["offset"] for r in rows] == [4, 6, 7]


# ------------------------------------------------------------------ several ranges in one task


def test_several_ranges_of_several_partitions_and_topics_in_one_task(
    bootstrap_servers, make_topic, read_path
):
    """One consumer reads them all at once; every range is exact, batches are full."""
    topics = [make_topic(partitions=4), make_topic(partitions=3)]
    sent: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for t, topic in enumerate(topics):
        for p in range(4 - t):
            sent[(topic, p)] = produce_batches(
                bootstrap_servers, topic, [7 + 3 * p, 1, 20 - p], partition=p
            )
    ranges = [
        OffsetRange(topics[0], 0, 0, 28),  # all of it
        OffsetRange(topics[0], 1, 2, 20),  # inside
        OffsetRange(topics[0], 2, 5, 6),  # one record
        OffsetRange(topics[0], 3, 30, 30),  # empty: skipped
        OffsetRange(topics[1], 0, 10, 28),  # the same partition number in another topic
        OffsetRange(topics[1], 1, 0, 1),
        OffsetRange(topics[1], 2, 27, 30),  # the partition's last records
    ]
    batches = read_many(bootstrap_servers, ranges, max_batch_rows=7, include_headers=True)
    assert all(b.schema == arrow_schema(True) for b in batches)
    assert [b.num_rows for b in batches[:-1]] == [7] * (len(batches) - 1)  # full batches
    assert 0 < batches[-1].num_rows <= 7
    got = offsets_by_partition(batches)
    want = {
        (r.topic, r.partition): list(range(r.from_offset, r.until_offset)) for r in ranges if r.size
    }
    assert got == want
    values = {(r["topic"], r["partition"], r["offset"]): r["value"] for r in rows_of(batches)}
    for (topic, p), offsets in want.items():
        assert [values[(topic, p, o)] for o in offsets] == [
            sent[(topic, p)][o]["value"] for o in offsets
        ]


def test_a_task_of_many_small_ranges(bootstrap_servers, make_topic, read_path):
    topic = make_topic(partitions=40)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20})
    for i in range(40 * 25):
        producer.produce(topic, partition=i % 40, value=b"%d" % i)
    assert producer.flush(30) == 0
    ranges = [OffsetRange(topic, p, p % 5, 25 - p % 3) for p in range(40)]
    started = time.monotonic()
    batches = read_many(bootstrap_servers, ranges)
    assert time.monotonic() - started < 20
    assert len(batches) == 1  # one batch for the task, not one per range
    assert offsets_by_partition(batches) == {
        (topic, r.partition): list(range(r.from_offset, r.until_offset)) for r in ranges
    }


def test_a_range_ending_at_the_end_of_its_partition_without_records(mock_servers, read_path):
    """Partition 0's range ends in a transaction marker (offset 5 holds no record): the
    end-of-partition event ends it while partition 1's range goes on being read."""
    topic = mock_topic()
    producer = Producer({"bootstrap.servers": mock_servers, "transactional.id": topic})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, partition=0, value=b"t%d" % i)
    producer.commit_transaction(10)
    produce_batches(mock_servers, topic, [40, 40], partition=1)

    started = time.monotonic()
    batches = read_many(
        mock_servers,
        [OffsetRange(topic, 0, 2, 6), OffsetRange(topic, 1, 3, 80)],
        max_batch_rows=10,
    )
    assert time.monotonic() - started < 10  # ended on the event, not the 30 s deadline
    assert offsets_by_partition(batches) == {
        (topic, 0): [2, 3, 4],
        (topic, 1): list(range(3, 80)),
    }


def test_out_of_range_on_one_partition_of_a_task(mock_servers, caplog, read_path):
    topic = mock_topic()
    produce_batches(mock_servers, topic, [10], partition=0)
    produce_batches(mock_servers, topic, [10], partition=1)
    ranges = [OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 500, 510)]
    started = time.monotonic()
    with pytest.raises(DataLossError, match=rf"{topic}-1 .*\[500, 510\)") as info:
        read_many(mock_servers, ranges, poll_timeout_s=60.0)
    assert info.value.partition.partition == 1
    assert time.monotonic() - started < 20  # the broker's error, not the 60 s deadline

    with caplog.at_level(logging.WARNING, logger="spark_groups.read.reader"):
        batches = read_many(mock_servers, ranges, poll_timeout_s=60.0, fail_on_data_loss=False)
    assert offsets_by_partition(batches) == {(topic, 0): list(range(10))}
    assert any(f"{topic}-1" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(broker_kind() == "tansu", reason="Tansu cannot delete records")
def test_deleted_records_of_one_partition_of_a_task(
    bootstrap_servers, make_topic, caplog, read_path
):
    """Records deleted below the range (DeleteRecords, as retention does): fail, or skip them
    and read the rest of the range from the new log start, beside the other ranges."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = make_topic(partitions=2)
    produce_batches(bootstrap_servers, topic, [10, 10], partition=0)
    produce_batches(bootstrap_servers, topic, [10, 10], partition=1)
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, 1, 15)]).values():
        future.result(timeout=30)
    ranges = [OffsetRange(topic, 0, 0, 20), OffsetRange(topic, 1, 5, 20)]
    with pytest.raises(DataLossError, match=rf"records \[5, 15\) of {topic}-1"):
        read_many(bootstrap_servers, ranges)

    with caplog.at_level(logging.WARNING, logger="spark_groups.read.reader"):
        batches = read_many(bootstrap_servers, ranges, fail_on_data_loss=False)
    assert offsets_by_partition(batches) == {
        (topic, 0): list(range(20)),
        (topic, 1): list(range(15, 20)),
    }
    assert any("[5, 15)" in r.getMessage() for r in caplog.records)


def test_a_stalled_range_names_its_partition(bootstrap_servers, make_topic, caplog, read_path):
    """Partition 1's range goes past its log end: it stalls on its own, the others finish."""
    topic = make_topic(partitions=3)
    for p in range(3):
        produce_batches(bootstrap_servers, topic, [10], partition=p)
    ranges = [
        OffsetRange(topic, 0, 0, 10),
        OffsetRange(topic, 1, 8, 15),
        OffsetRange(topic, 2, 3, 7),
    ]
    started = time.monotonic()
    with pytest.raises(DataLossError) as info:
        read_many(bootstrap_servers, ranges, poll_timeout_s=1.0)
    assert time.monotonic() - started < 15
    assert f"{topic}-1" in str(info.value) and "[10, 15)" in str(info.value)
    assert info.value.partition.partition == 1

    with caplog.at_level(logging.WARNING, logger="spark_groups.read.reader"):
        batches = read_many(bootstrap_servers, ranges, poll_timeout_s=1.0, fail_on_data_loss=False)
    assert offsets_by_partition(batches) == {
        (topic, 0): list(range(10)),
        (topic, 1): [8, 9],
        (topic, 2): [3, 4, 5, 6],
    }
    assert any(f"{topic}-1" in r.getMessage() for r in caplog.records)


def test_several_ranges_on_an_unreachable_broker_is_not_data_loss(read_path):
    config = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}
    with pytest.raises(BrokerUnreachableError):
        list(
            read_ranges(
                config,
                [OffsetRange("t", 0, 0, 1), OffsetRange("t", 1, 0, 1)],
                include_headers=False,
                poll_timeout_s=1.0,
                fail_on_data_loss=False,
            )
        )


def test_read_ranges_arguments(bootstrap_servers, created, read_path):
    assert (
        read_many(bootstrap_servers, [OffsetRange("a", 0, 5, 5), OffsetRange("b", 1, 7, 5)]) == []
    )
    assert read_many(bootstrap_servers, []) == []
    assert created == []  # empty ranges create no consumer
    with pytest.raises(ValueError, match="one range per partition"):
        read_many(bootstrap_servers, [OffsetRange("a", 0, 0, 5), OffsetRange("a", 0, 5, 9)])


def test_a_task_stopped_early_leaves_the_pooled_consumer_clean(
    bootstrap_servers, make_topic, created, read_path
):
    topic = make_topic(partitions=3)
    for p in range(3):
        produce_batches(bootstrap_servers, topic, [30], partition=p)
    it = read_ranges(
        {"bootstrap.servers": bootstrap_servers},
        [OffsetRange(topic, p, 0, 30) for p in range(3)],
        include_headers=False,
        max_batch_rows=5,
    )
    assert next(it).num_rows == 5
    it.close()
    # The next task on the same consumer gets only its own partitions' records.
    batches = read_many(bootstrap_servers, [OffsetRange(topic, 1, 10, 20)])
    assert offsets_by_partition(batches) == {(topic, 1): list(range(10, 20))}
    batches = read_many(bootstrap_servers, [OffsetRange(topic, p, 25, 30) for p in (2, 0)])
    assert offsets_by_partition(batches) == {
        (topic, 0): list(range(25, 30)),
        (topic, 2): list(range(25, 30)),
    }
    assert len(created) == 1


# ------------------------------------------------------------------ the consumer pool


def test_consumers_are_pooled_per_configuration(bootstrap_servers, make_topic, created, read_path):
    topic = make_topic(partitions=2)
    produce_batches(bootstrap_servers, topic, [20], partition=0)
    produce_batches(bootstrap_servers, topic, [20], partition=1)

    for p in (0, 1, 0):
        assert len(rows_of(read_all(bootstrap_servers, OffsetRange(topic, p, 0, 20)))) == 20
    assert len(created) == 1

    # A caller that stops early gives the consumer back (unassigned) all the same.
    it = read_range(
        {"bootstrap.servers": bootstrap_servers},
        OffsetRange(topic, 1, 0, 20),
        include_headers=False,
        max_batch_rows=5,
    )
    assert next(it).num_rows == 5
    it.close()
    assert len(rows_of(read_all(bootstrap_servers, OffsetRange(topic, 0, 5, 10)))) == 5
    assert len(created) == 1

    other = {"bootstrap.servers": bootstrap_servers, "client.id": "another"}
    assert len(list(read_range(other, OffsetRange(topic, 0, 0, 3), include_headers=False))) == 1
    assert len(created) == 2
    assert created[0]["fetch.queue.backoff.ms"] == "10"  # the reader's default
    assert created[1]["client.id"] == "another"


def test_user_config_wins_over_defaults_but_not_over_requirements(caplog):
    with caplog.at_level(logging.DEBUG, logger="spark_groups"):
        config = reader.reader_config(
            {
                "bootstrap.servers": "b:9092",
                "fetch.queue.backoff.ms": "250",
                "group.id": "mine",
                "enable.auto.commit": "true",
                "sasl.password": SECRET,
            }
        )
    assert config["fetch.queue.backoff.ms"] == "250"
    assert config["group.id"] == "mine"
    assert config["enable.auto.commit"] == "false"
    assert config["auto.offset.reset"] == "error"
    assert config["enable.partition.eof"] == "true"
    assert any("enable.auto.commit" in r.getMessage() for r in caplog.records)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert "group.id" in reader.reader_config({"bootstrap.servers": "b:9092"})


def test_consumer_errors_never_show_secrets(read_path):
    config = {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "sasl_plaintext",
        "sasl.password": SECRET,
        "sasl.mechanism": "X-BOGUS",  # refused by librdkafka, so creating the consumer fails
    }
    with pytest.raises(SparkGroupsError) as info:
        list(read_range(config, OffsetRange("t", 0, 0, 1), include_headers=False))
    assert SECRET not in str(info.value)
    assert "127.0.0.1:1" in str(info.value)


def test_unreachable_broker_is_not_data_loss(read_path):
    """An outage must not pass for data loss: with failOnDataLoss=false it would skip data."""
    config = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "sasl.password": SECRET}
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError) as info:
        list(
            read_range(
                config,
                OffsetRange("t", 0, 0, 1),
                include_headers=False,
                poll_timeout_s=1.0,
                fail_on_data_loss=False,
            )
        )
    assert time.monotonic() - started < 15
    assert config["bootstrap.servers"] in str(info.value)
    assert SECRET not in str(info.value)


#: A process that reads a range (its consumer pooled), forks, and in the child checks out a
#: consumer; argv: servers, topic. Exit 0 when the child got a consumer of its own (and closed
#: none of the inherited ones) and the parent's pooled consumer still reads. The child only
#: creates its consumer: it never waits on librdkafka. A child that waits on one can hang for
#: a reason outside this project: fork() copies glibc's getaddrinfo() lock (``__check_pf``)
#: held, when one of the parent's librdkafka threads was resolving a broker's address just
#: then (the parent's consumer still connecting to its group coordinator); the child's own
#: broker thread then waits on it forever (seen with gdb, 3 runs in 300). librdkafka is not
#: fork-safe; PySpark forks its workers from pyspark.daemon, which holds no Kafka client.
_FORK_PROGRAM = """
import os, sys, time
from spark_groups.offsets import OffsetRange
from spark_groups.read import pool
from spark_groups.read.reader import read_range

servers, topic = sys.argv[1], sys.argv[2]

def offsets(first, until):
    batches = read_range({"bootstrap.servers": servers}, OffsetRange(topic, 0, first, until),
                         include_headers=False, poll_timeout_s=30.0)
    return [o for b in batches for o in b.column("offset").to_pylist()]

assert offsets(0, 30) == list(range(30)), "the parent's first read"
[(key, [inherited])] = pool._POOL.items()
pid = os.fork()
if pid == 0:
    ok = not pool._POOL and inherited in pool._ABANDONED  # inherited: kept, never closed
    own = pool.checkout(dict(key[2]), key[1])
    ok = ok and own.pid == os.getpid() and own.consumer is not inherited.consumer
    os._exit(0 if ok else 3)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)  # polling a child's exit with a deadline
else:
    os.kill(pid, 9)
    sys.exit("the forked child hung")
assert os.waitstatus_to_exitcode(status) == 0, f"the child: {status}"
assert offsets(0, 5) == list(range(5)), "the parent's pooled consumer after the fork"
assert pool._POOL[key] == [inherited], "the parent reads on the same pooled consumer"
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_worker_makes_its_own_consumer(bootstrap_servers, make_topic, read_path):
    """PySpark forks workers: a consumer inherited through fork must never be used or closed;
    the child gets a consumer of its own.

    The fork happens in a process of its own (on the read path under test, from the
    environment), whose only client is its pooled consumer. Forked from the test process
    itself, the child inherited every client and thread earlier tests left there."""
    topic = make_topic(partitions=1)
    produce_batches(bootstrap_servers, topic, [30])
    program = [sys.executable, "-c", _FORK_PROGRAM, bootstrap_servers, topic]
    done = subprocess.run(program, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (
        f"exit {done.returncode}: {done.stdout[-500:]} {done.stderr[-4000:]}"
    )


# ------------------------------------------------------------------ the two read paths


def test_native_and_python_read_paths_give_equal_batches(
    bootstrap_servers, make_topic, native_extension
):
    """The native path's batches equal the Python path's: the schema and every value (null
    keys, headers with null values, timestamps), the batch sizes, with headers on and off and
    two batch sizes; for 4 ranges starting and ending mid-partition, and for a read_committed
    range over committed and aborted transactions (control records and aborted records are
    never handed over; the range ends on the end-of-partition event)."""
    topic = make_topic(partitions=4)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    for i in range(4_000):
        producer.produce(
            topic,
            value=os.urandom(i % 50) if i % 11 else None,
            key=None if i % 7 == 0 else b"k%d" % i,
            partition=i % 4,
            headers=[("h", b"%d" % i), ("empty", None)] if i % 3 == 0 else None,
        )
    assert producer.flush(30) == 0
    cases = [
        (
            {"bootstrap.servers": bootstrap_servers},
            [OffsetRange(topic, p, 100, 900 - 10 * p) for p in range(4)],
            3_140,
        ),
    ]
    if broker_kind() != "tansu":  # Apache Kafka: aborted records are in the log, and filtered
        tx_topic = make_topic(partitions=1)
        tx = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": tx_topic})
        tx.init_transactions(30)
        for commit in (True, False, True):
            tx.begin_transaction()
            for i in range(5):
                tx.produce(tx_topic, value=b"v%d" % i, partition=0)
            assert tx.flush(30) == 0  # sent, so that the aborted ones are in the log
            (tx.commit_transaction if commit else tx.abort_transaction)(30)
        cases.append(
            (
                {"bootstrap.servers": bootstrap_servers, "isolation.level": "read_committed"},
                [OffsetRange(tx_topic, 0, 0, 18)],  # 3 x (5 records + a marker)
                10,  # the committed ones
            )
        )
    order = [("partition", "ascending"), ("offset", "ascending")]
    for config, ranges, total in cases:
        for headers in (False, True):
            for rows in (10_000, 333):
                tables = {}
                for path in ("python", "native"):
                    before = reader.TASKS_BY_PATH[path]
                    batches = list(
                        read_ranges(
                            config,
                            ranges,
                            include_headers=headers,
                            max_batch_rows=rows,
                            poll_timeout_s=30.0,
                            read_path=path,
                        )
                    )
                    assert reader.TASKS_BY_PATH[path] == before + 1  # it ran on that path
                    assert all(b.schema == arrow_schema(headers) for b in batches)
                    tables[path] = (
                        [b.num_rows for b in batches],
                        pa.Table.from_batches(batches).sort_by(order),
                    )
                (py_sizes, py), (native_sizes, ours) = tables["python"], tables["native"]
                assert py.num_rows == total, (ranges, headers, rows)
                assert native_sizes == py_sizes
                assert ours.equals(py), (ranges, headers, rows)


def test_native_batches_of_megabytes_keep_their_values_while_held_and_reused(
    bootstrap_servers, make_topic, native_extension
):
    """Batches whose values pass 1 MiB take their value buffer from the native path's pool (the
    last batch's size is the next one's hint): every value is right whether the batches are
    dropped as they come (their buffers reused) or all held until the read ends (none may be
    handed out again while pyarrow holds it)."""
    topic, records, size = make_topic(partitions=2), 3_000, 4_000
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, value=b"%08d" % i * (size // 8), key=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    ranges = [OffsetRange(topic, p, 0, records // 2) for p in range(2)]
    config = {"bootstrap.servers": bootstrap_servers}

    def wrong(batch: pa.RecordBatch) -> list[int]:
        keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
        pairs = zip(keys, values, strict=True)
        return [int(k) for k, v in pairs if v != b"%08d" % int(k) * (size // 8)]

    for hold in (False, True):
        held, seen, bad = [], 0, []
        batches = read_ranges(
            config, ranges, include_headers=False, max_batch_rows=400, read_path="native"
        )
        for batch in batches:  # 400 rows x 4 KB: 1.6 MB of values a batch
            seen += batch.num_rows
            bad += wrong(batch)
            if hold:
                held.append(batch)
        bad += [k for batch in held for k in wrong(batch)]
        assert (seen, bad) == (records, []), f"hold={hold}"
