"""The share batch's acknowledgements wait for the sink's table (spark_groups.share.acks).

Real broker, real Delta table, no Spark: a test acquires records with a share consumer,
hands them to an :class:`Acknowledger` as a reading task does, and makes the commits a
sink makes (a commit info naming the task attempts it holds). What the broker then does
with the records is checked with a second consumer of the group: records come in offset
order, so a later record arriving alone proves the earlier ones will not come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.share.acks import Acknowledger, Acquired, CommitWatch, Outcome
from spark_groups.sink.share_info import commit_info
from spark_groups.spark.task_context import TaskAttempt

from support.broker import produce_ids, wait_until
from support.share import poll_until, share_consumer, share_group


def noting(done: list) -> Any:
    """An ``on_done`` that notes each (consumer, outcome)."""
    return lambda acquired, outcome, _acked_at: done.append((acquired.consumer, outcome))


@pytest.fixture
def table(tmp_path: Path) -> str:
    """A sink's table (its content does not matter here)."""
    path = str(tmp_path / "sink")
    write_deltalake(path, pa.table({"id": pa.array([], pa.int64())}))
    return path


def commit(table: str, *attempts: TaskAttempt) -> int:
    """A commit of the sink naming ``attempts``; its version."""
    dt = DeltaTable(table)
    dt.create_write_transaction(
        [], "append", dt.schema(),
        commit_properties=CommitProperties(custom_metadata=commit_info(attempts)),
    )  # fmt: skip
    dt.update_incremental()
    return dt.version()


@pytest.fixture
def done() -> Iterator[list[tuple[Any, Outcome]]]:
    """The consumers the acknowledger gave back, with their outcome; closed after."""
    returned: list[tuple[Any, Outcome]] = []
    yield returned
    for consumer, _ in returned:
        consumer.close()


def acquire(
    servers: str, group: str, topic: str, count: int, attempt: TaskAttempt, lock_s: float = 30.0
) -> Acquired:
    """What a reading task hands over: ``count`` records acquired by a consumer of ``group``."""
    consumer = share_consumer(servers, group, topic)
    records = poll_until(consumer, count)
    assert len(records) == count
    offsets = PartitionOffsets.of(
        (TopicPartition(m.topic(), m.partition()), m.offset()) for m in records
    )
    return Acquired(attempt, consumer, offsets, time.monotonic() + lock_s)


def next_delivery(servers: str, group: str, topic: str, offset: int) -> list[tuple[int, int]]:
    """Produce one more record (at ``offset`` of the one-partition topic) and poll a fresh
    consumer until it arrives: (offset, delivery count) of everything it got on the way."""
    produce_ids(servers, topic, [offset], 1)
    consumer = share_consumer(servers, group, topic)
    try:
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while not any(o == offset for o, _ in got) and time.monotonic() < deadline:
            records = [m for m in consumer.poll(0.5) if m.error() is None]
            got += [(m.offset(), m.delivery_count()) for m in records]
        return got
    finally:
        consumer.close()


def test_records_are_accepted_only_after_a_commit_names_their_attempt(
    bootstrap_servers: str, make_topic: Callable[..., str], table: str, done: list
) -> None:
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(5), 1)
    group = share_group(bootstrap_servers)
    mine = TaskAttempt("run-1", 7, 3)
    acks = Acknowledger(CommitWatch(table), noting(done), poll_s=0.05)
    acks.add(acquire(bootstrap_servers, group, topic, 5, mine))
    # Another query's batch and this run's previous batch land: nothing is settled.
    commit(table, TaskAttempt("run-0", 7, 3))
    commit(table, TaskAttempt("run-1", 6, 3))
    other = commit(table)  # a commit that is not a share batch's
    wait_until(lambda: acks.watch.seen >= other, what="the acknowledger to read the commits")
    assert acks.waiting() == [mine]
    commit(table, mine, TaskAttempt("run-1", 7, 4))
    wait_until(lambda: acks.settled.get(mine) is Outcome.ACCEPTED, what="the ACCEPT")
    assert [o for _, o in done] == [Outcome.ACCEPTED]
    # Accepted: the next consumer gets only the record produced after them.
    assert next_delivery(bootstrap_servers, group, topic, 5) == [(5, 1)]


def test_an_attempt_the_commit_left_out_releases_its_records_at_once(
    bootstrap_servers: str, make_topic: Callable[..., str], table: str, done: list
) -> None:
    """A retried or speculative attempt won: this one's records come back now, not after
    their lock (30 s here)."""
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(3), 1)
    group = share_group(bootstrap_servers)
    loser, winner = TaskAttempt("run-1", 2, 10), TaskAttempt("run-1", 2, 11)
    acks = Acknowledger(CommitWatch(table), noting(done), poll_s=0.05)
    acks.add(acquire(bootstrap_servers, group, topic, 3, loser))
    released = time.monotonic()
    commit(table, winner)
    wait_until(lambda: acks.settled.get(loser) is Outcome.RELEASED, what="the RELEASE")
    again = next_delivery(bootstrap_servers, group, topic, 3)
    assert time.monotonic() - released < 30
    assert sorted(again) == [(0, 2), (1, 2), (2, 2), (3, 1)]


def test_without_a_commit_the_records_go_back_when_their_lock_runs_out(
    bootstrap_servers: str, make_topic: Callable[..., str], table: str, done: list
) -> None:
    """The batch never lands (its driver died): the consumer is settled at the lock's end
    and goes back to its pool; the records come back with a higher delivery count."""
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(2), 1)
    group = share_group(bootstrap_servers, **{"share.record.lock.duration.ms": "3000"})
    lost = TaskAttempt("run-1", 0, 0)
    acks = Acknowledger(CommitWatch(table), noting(done), poll_s=0.05)
    acks.add(acquire(bootstrap_servers, group, topic, 2, lost, lock_s=3.0))
    wait_until(lambda: acks.settled.get(lost) is Outcome.EXPIRED, what="the lock's end")
    assert [o for _, o in done] == [Outcome.EXPIRED]
    assert sorted(next_delivery(bootstrap_servers, group, topic, 2)) == [(0, 2), (1, 2), (2, 1)]
