"""The read path's parts on their own, without a broker: faults (typed errors, stalls, data
loss), a chunk's error events, the ranges' names in messages and the consume chunk size."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from spark_groups.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnreachableError,
    DataLossError,
    SparkGroupsError,
)
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.options import READ_PATHS
from spark_groups.read import columns, native
from spark_groups.read.events import split_events
from spark_groups.read.faults import Faults
from spark_groups.read.pool import PooledConsumer
from spark_groups.read.progress import RangeState, describe

SECRET = "hunter2-do-not-show"
CONFIG = {"bootstrap.servers": "b1:9092", "sasl.password": SECRET, "sasl.username": "me"}


class _Broker:
    """A consumer whose broker reports the given watermarks (or raises ``fails``)."""

    def __init__(self, low: int = 0, high: int = 100, fails: Exception | None = None) -> None:
        self.marks = (low, high)
        self.fails = fails
        self.cached: list[bool] = []

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False) -> Any:
        if self.fails is not None:
            raise self.fails
        self.cached.append(cached)
        return self.marks


def faults_of(
    ranges: list[OffsetRange], broker: _Broker | None = None, fail: bool = True
) -> tuple[Faults, list[RangeState]]:
    states = [RangeState(r, i) for i, r in enumerate(ranges)]
    entry = PooledConsumer(key=(os.getpid(), ()), consumer=broker or _Broker())
    return Faults(entry, CONFIG, states, 2.0, fail), states


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="spark_groups.read.reader"):
        yield caplog


# ------------------------------------------------------------------ data loss


def test_lost_records_raise_or_warn(warnings):
    faults, (state,) = faults_of([OffsetRange("t", 2, 10, 20)])
    with pytest.raises(DataLossError) as info:
        faults.lost(state, 12, 20, "gone")
    assert (info.value.partition, info.value.from_offset, info.value.until_offset) == (
        TopicPartition("t", 2),
        12,
        20,
    )
    assert "records [12, 20) of t-2 (planned range [10, 20)) cannot be read: gone" in str(
        info.value
    )
    assert "failOnDataLoss=false" in str(info.value)

    lenient, (state,) = faults_of([OffsetRange("t", 2, 10, 20)], fail=False)
    lenient.lost(state, 12, 20, "gone")
    (record,) = warnings.records
    assert record.name == "spark_groups.read.reader"  # the logger it always had
    assert "records [12, 20) of t-2" in record.getMessage()
    assert "skipping them (failOnDataLoss=false)" in record.getMessage()


def test_out_of_range_decides_where_to_read_on(warnings):
    rng = OffsetRange("t", 0, 100, 200)
    # Deleted below the range's next offset: read on from the log start.
    faults, (state,) = faults_of([rng], _Broker(low=150, high=300), fail=False)
    assert faults.out_of_range(state) == 150
    # Deleted past the range's end: nothing left of it.
    faults, (state,) = faults_of([rng], _Broker(low=250, high=300), fail=False)
    assert faults.out_of_range(state) is None
    # Beyond the log: all of the rest is lost.
    faults, (state,) = faults_of([OffsetRange("t", 0, 400, 410)], _Broker(0, 300), fail=False)
    assert faults.out_of_range(state) is None
    assert [r.getMessage().split(" cannot")[0] for r in warnings.records] == [
        "records [100, 150) of t-0 (planned range [100, 200))",
        "records [100, 200) of t-0 (planned range [100, 200))",
        "records [400, 410) of t-0 (planned range [400, 410))",
    ]
    faults, (state,) = faults_of([OffsetRange("t", 0, 400, 410)], _Broker(0, 300))
    with pytest.raises(DataLossError, match=r"offset 400 is beyond the log \(log start 0, end 300"):
        faults.out_of_range(state)


def test_a_stall_is_data_loss_unless_the_broker_is_unreachable(warnings):
    broker = _Broker(low=3, high=50)
    faults, (state,) = faults_of([OffsetRange("t", 1, 10, 20)], broker)
    state.next_offset = 15
    with pytest.raises(DataLossError, match=r"records \[15, 20\) of t-1") as info:
        faults.stalled(state)
    assert "no record arrived for 2 s (log start 3, last fetched high watermark 50)" in str(
        info.value
    )
    assert broker.cached == [False, True]

    # Metadata answers, but fetches kept failing on the transport: not data loss.
    faults.entry.last_error = KafkaError(KafkaError._TRANSPORT)
    with pytest.raises(BrokerUnreachableError) as unreachable:
        faults.stalled(state)
    assert (unreachable.value.servers, unreachable.value.waited_s) == ("b1:9092", 2.0)

    # Nothing answers at all: not data loss either, also with failOnDataLoss=false.
    down = _Broker(fails=KafkaException(KafkaError(KafkaError._TRANSPORT, SECRET)))
    lenient, (state,) = faults_of([OffsetRange("t", 1, 10, 20)], down, fail=False)
    with pytest.raises(BrokerUnreachableError, match="cannot reach b1:9092 to read t-1") as gone:
        lenient.stalled(state)
    assert SECRET not in str(gone.value)
    assert warnings.records == []


# ------------------------------------------------------------------ Kafka errors


def test_fetch_errors_raise_typed_errors_or_pass():
    faults, (state, _) = faults_of([OffsetRange("t", 0, 0, 5), OffsetRange("u", 1, 0, 5)])
    # The readers' unused group and transient errors pass.
    faults.fetch_error(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), state, "t")
    faults.fetch_error(KafkaError(KafkaError._TRANSPORT, retriable=True), state, "t")
    faults.fetch_error(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), None, "t")

    with pytest.raises(AuthorizationError) as denied:
        faults.fetch_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), None, "t")
    assert (denied.value.resource, denied.value.principal) == ("t", "User:me")
    with pytest.raises(AuthorizationError) as denied:  # an event without a topic
        faults.fetch_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), None, None)
    assert denied.value.resource == "t"  # the task's first topic

    bad = KafkaError(KafkaError.INVALID_RECORD, f"bad record {SECRET}", retriable=False)
    with pytest.raises(SparkGroupsError, match=r"reading t-0 \[0, 5\) from b1:9092 failed") as e:
        faults.fetch_error(bad, state, "t")
    assert SECRET not in str(e.value) and "INVALID_RECORD" in str(e.value)
    fatal = KafkaError(KafkaError._FATAL, "fenced", fatal=True, retriable=True)
    with pytest.raises(SparkGroupsError, match=r"reading t-0 \[0, 5\), u-1 \[0, 5\) from"):
        faults.fetch_error(fatal, None, "t")


def test_refused_credentials_raise_at_once():
    faults, _ = faults_of([OffsetRange("t", 0, 0, 5)])
    faults.client_error()  # no error so far
    faults.entry.last_error = KafkaError(KafkaError._TRANSPORT)
    faults.client_error()  # not about credentials
    faults.entry.last_error = KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, SECRET)
    with pytest.raises(AuthenticationError) as info:
        faults.client_error()
    assert (info.value.servers, info.value.username) == ("b1:9092", "me")
    assert SECRET not in str(info.value)


# ------------------------------------------------------------------ events


def test_split_events_keeps_records_and_collects_events():
    faults, states = faults_of(
        [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 0, 10)]
    )
    by_partition = {s.partition: s for s in states}

    def state_of(msg: Message) -> RangeState | None:
        return by_partition.get(msg.partition())

    def record(p: int, o: int) -> Message:
        return Message(topic="t", partition=p, offset=o)

    def event(p: int, o: int, code: int) -> Message:
        return Message(topic="t", partition=p, offset=o, error=KafkaError(code))

    msgs = [
        record(0, 1),
        event(0, 4, KafkaError._PARTITION_EOF),
        event(0, 6, KafkaError._PARTITION_EOF),
        event(0, 5, KafkaError._PARTITION_EOF),
        record(2, 3),
        event(9, 1, KafkaError._PARTITION_EOF),  # no range of the task: ignored
        event(1, 0, KafkaError.OFFSET_OUT_OF_RANGE),
        record(1, 7),  # after its range's out-of-range event: dropped
        record(2, 4),
        event(0, 0, KafkaError.GROUP_AUTHORIZATION_FAILED),
    ]
    good, events = split_events(msgs, state_of, faults)
    assert [(m.partition(), m.offset()) for m in good] == [(0, 1), (2, 3), (2, 4)]
    assert events.eof == {states[0]: 6}
    assert events.out_of_range == [states[1]]

    with pytest.raises(SparkGroupsError, match=r"reading t-2 \[0, 10\)"):
        split_events([event(2, 0, KafkaError.INVALID_RECORD)], state_of, faults)


# ------------------------------------------------------------------ the native path's events


class _FakeNative:
    """The C consumer's side of NativeTaskRead's decisions: the ranges' progress, and what it
    was told (finish, seek)."""

    def __init__(self, progress: list[tuple[int, int, float, int]]) -> None:
        self.ranges = progress
        self.told: list[tuple[Any, ...]] = []

    def progress(self) -> list[tuple[int, int, float, int]]:
        return self.ranges

    def finish(self, index: int) -> None:
        self.told.append(("finish", index))

    def seek(self, index: int, offset: int) -> None:
        self.told.append(("seek", index, offset))


def native_task(
    ranges: list[OffsetRange],
    progress: list[tuple[int, int, float, int]],
    broker: _Broker,
    fail: bool,
) -> tuple[native.NativeTaskRead, _FakeNative]:
    fake = _FakeNative(progress)
    consumer = type(
        "Consumer", (), {"native": fake, "get_watermark_offsets": broker.get_watermark_offsets}
    )()
    entry = PooledConsumer(key=(os.getpid(), "native", ()), consumer=consumer)
    return native.NativeTaskRead(entry, CONFIG, ranges, False, 100, 2.0, fail), fake


def test_the_native_paths_events_are_decided_as_on_the_python_path(warnings):
    """The events C hands back go through the same Faults: the readers' unused group passes,
    a denied topic and refused credentials raise typed errors, lost records raise or are
    skipped (read on from the log start, or the range given up)."""
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 100, 200)]
    group_denied = (native._FETCH, -1, KafkaError.GROUP_AUTHORIZATION_FAILED, "denied", None)
    task, fake = native_task(ranges, [(3, 0, 0.5, 0), (100, 0, 0.5, 0)], _Broker(150, 300), True)
    task._handle([group_denied])
    assert fake.told == [] and task.entry.last_error is None
    assert task.states[0].next_offset == 3  # the progress came over from C

    topic_denied = (native._FETCH, 0, KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied", "t")
    with pytest.raises(AuthorizationError):
        task._handle([topic_denied])
    refused = (native._CLIENT, -1, KafkaError.SASL_AUTHENTICATION_FAILED, SECRET, None)
    with pytest.raises(AuthenticationError) as info:
        task._handle([refused])
    assert SECRET not in str(info.value)

    out_of_range = (native._OUT_OF_RANGE, -1, 0, "", None)  # range 1 is flagged
    task, fake = native_task(ranges, [(3, 0, 0.5, 0), (100, 0, 0.5, 1)], _Broker(150, 300), True)
    with pytest.raises(DataLossError, match=r"records \[100, 150\) of t-1"):
        task._handle([out_of_range])
    task, fake = native_task(ranges, [(3, 0, 0.5, 0), (100, 0, 0.5, 1)], _Broker(150, 300), False)
    task._handle([out_of_range])
    assert fake.told == [("seek", 1, 150)]  # read on from the new log start
    task, fake = native_task(ranges, [(3, 0, 0.5, 0), (100, 0, 0.5, 1)], _Broker(250, 300), False)
    task._handle([out_of_range])
    assert fake.told == [("finish", 1)] and task.states[1].done  # nothing left of it
    assert len(warnings.records) == 2


def test_the_native_path_gives_up_a_stalled_range():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 10)]
    # Range 1 has made no progress for 5 s (the poll timeout is 2 s), range 0 for 0.5 s.
    task, fake = native_task(ranges, [(3, 0, 0.5, 0), (4, 0, 5.0, 0)], _Broker(0, 4), True)
    with pytest.raises(DataLossError, match=r"records \[4, 10\) of t-1"):
        task._check_stalls()
    task, fake = native_task(ranges, [(3, 0, 0.5, 0), (4, 0, 5.0, 0)], _Broker(0, 4), False)
    task._check_stalls()
    assert fake.told == [("finish", 1)]
    assert not task.states[0].done and task.states[1].done


def test_which_read_path_runs(monkeypatch, caplog):
    config = {"bootstrap.servers": "b:9092", "group.id": "g"}
    monkeypatch.delenv(native.READ_PATH_ENV, raising=False)
    assert native.use_native("python", config) is False
    monkeypatch.setenv(native.READ_PATH_ENV, "python")
    assert native.use_native("auto", config) is False
    assert native.use_native("native", config) is False  # python wins
    monkeypatch.setenv(native.READ_PATH_ENV, "fast")
    with pytest.raises(ValueError, match="SPARK_GROUPS_READ_PATH"):
        native.use_native("auto", config)
    monkeypatch.delenv(native.READ_PATH_ENV)
    with pytest.raises(ValueError, match="read_path"):
        native.use_native("c", config)
    assert native.READ_PATHS == READ_PATHS  # the option's values

    # Where it cannot load: the Python path, said once at INFO (with why); an error where
    # required.
    monkeypatch.setattr(native, "_load_error", "the C extension is not built")
    monkeypatch.setattr(native, "_told", set())
    with caplog.at_level(logging.INFO, logger="spark_groups"):
        assert native.use_native("auto", config) is False
        assert native.use_native("auto", config) is False
    said = [r for r in caplog.records if "not built" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert "the Python read path reads this process's tasks" in said[0].getMessage()
    with pytest.raises(SparkGroupsError, match="readPath=native requires"):
        native.use_native("native", config)
    monkeypatch.setenv(native.READ_PATH_ENV, "native")
    with pytest.raises(SparkGroupsError, match="SPARK_GROUPS_READ_PATH=native requires"):
        native.use_native("auto", config)

    # Where it loads: native, but not for a configuration holding a Python callback.
    monkeypatch.setattr(native, "_load_error", "")
    monkeypatch.delenv(native.READ_PATH_ENV)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="spark_groups"):
        assert native.use_native("auto", config) is True
        assert native.use_native("auto", config) is True
    said = [r.getMessage() for r in caplog.records]
    assert said == ["the native read path reads this process's tasks (spark_groups.read._native)"]
    assert native.use_native("auto", {**config, "oauth_cb": print}) is False


# ------------------------------------------------------------------ names and chunks


def test_describe_names_a_few_ranges():
    states = [RangeState(OffsetRange("t", p, p, 10), p) for p in range(5)]
    assert describe(states[:1]) == "t-0 [0, 10)"
    assert describe(states[:3]) == "t-0 [0, 10), t-1 [1, 10), t-2 [2, 10)"
    assert describe(states) == "t-0 [0, 10), t-1 [1, 10), t-2 [2, 10), ... (5 ranges)"


def test_consume_chunk_stays_under_the_collectors_threshold():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        assert columns.consume_chunk() == 489  # 70% of 700, rounded down
        gc.set_threshold(10, *before[1:])
        assert columns.consume_chunk() == 100  # at least
        gc.set_threshold(100_000, *before[1:])
        assert columns.consume_chunk() == 10_000  # at most
        gc.set_threshold(0, *before[1:])
        assert columns.consume_chunk() == 10_000  # collections off
    finally:
        gc.set_threshold(*before)
