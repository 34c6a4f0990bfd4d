"""Claims in the sink's table meeting the group's changes: a revocation pending while a
member resumes or releases its partitions, a zombie's claim, a stop during a barrier, a
release that does not land. Real broker, real sink table, no Spark.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from deltalake import DeltaTable
from revocation_support import PendingRevocation

from spark_groups.errors import SinkClaimError
from spark_groups.group.member import GroupMember
from spark_groups.group.partitions import Status
from spark_groups.group.stream import GroupStream
from spark_groups.offsets import BatchOffset, TopicPartition
from spark_groups.options import SourceOptions, parse_options
from spark_groups.sink import DeltaSink, claim_tokens
from spark_groups.sink.claim_tokens import claims_of
from spark_groups.sink.delta_arbiter import DeltaArbiter, for_source
from spark_groups.sink.plan import BatchPlan

from sink_support import SCHEMA, offsets_in, plan, rows, write_task
from support.broker import produce_ids, wait_until

FAST = {"kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}


def seeded(servers: str, make_topic: Callable[..., str], tmp_path: Path) -> tuple[str, str, Path]:
    """A topic of 2 partitions with 10 records each, a fresh group, and a sink table that
    holds offsets 0-4 of both for the group."""
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(servers, topic, range(10 * 2), 2)
    table = tmp_path / "sink"
    seed = write_task(table, [rows(0, range(5), topic=topic), rows(1, range(5), topic=topic)])
    DeltaSink(str(table), group).commit(plan(0, {0: (0, 5), 1: (0, 5)}, topic=topic), seed, SCHEMA)
    return topic, group, table


def source_options(
    servers: str, topic: str, group: str, table: Path, **extra: str
) -> SourceOptions:
    """The source's options of a member writing into ``table`` (``sink.table``)."""
    return parse_options(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "group.id": group,
            "startingOffsets": "earliest",
            "sink.table": str(table),
            **FAST,
            **extra,
        }
    )


def committed(
    servers: str, topic: str, group: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """What Kafka holds for ``group`` on ``partitions``, as a fresh member of it reads it."""
    fresh = GroupMember(
        parse_options(
            {"kafka.bootstrap.servers": servers, "subscribe": topic, "group.id": group}
        ).member_config(),
        [topic],
    ).start()
    try:
        return fresh.committed(sorted(partitions))
    finally:
        fresh.close()


def land(table: Path, topic: str, batch: BatchOffset, group: str) -> None:
    """Write ``batch``'s records into ``table`` for ``group`` as the delta-group sink does;
    not fenced."""
    files = write_task(
        table,
        [rows(r.partition, range(r.from_offset, r.until_offset), topic) for r in batch.ranges],
    )
    landed = DeltaSink(str(table), group).commit(
        BatchPlan.of(batch.batch, list(batch.ranges), batch.outside, batch.claim_map()),
        files,
        SCHEMA,
    )
    assert landed.fenced == ()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_revocation_pending_during_a_resume_comes_after_its_claim(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
    strategy: str,
) -> None:
    """Member B resumes its partitions (claiming them in the sink's table) while a rebalance
    that moves one of them to member A is pending. The resume runs on B's owner thread to
    its end, so B's claim lands before B's revocation begins, never after it; A then claims
    the moved partition anew and its batch lands. (When a revocation could run in the
    middle of a resume, B's claim landed after A's, and A's batch was fenced out of the
    table while Kafka was committed past it.) Real broker, real sink table, no Spark; B's
    polls are held back, so the rebalance is pending through the whole resume."""
    topic, group, table = seeded(bootstrap_servers, make_topic, tmp_path)
    options = source_options(
        bootstrap_servers, topic, group, table, **{"partition.assignment.strategy": strategy}
    )
    b, a = GroupStream(options, for_source(options)), GroupStream(options, for_source(options))
    streams.extend([b, a])
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    initial = BatchOffset.initial().to_json()
    b_member = b.ensure_started()
    wait_until(lambda: b_member.assignment == {p0, p1}, what="B's first assignment")
    with PendingRevocation(b) as pending:
        a.ensure_started()
        pending.wait_until_rebalancing(bootstrap_servers, 2)
        b_batch = BatchOffset.from_json(b.latest_offset(initial, None))
        assert "_resume" in pending.requests and b.metrics.revocations == 0
        assert b_batch.ends() == {p0: 10, p1: 10}  # B still owned both: its revocation waits
        land(table, topic, b_batch, group)
        produce_ids(bootstrap_servers, topic, range(20, 30), 2)  # records for the next owner
        pending.deliver()

        a_batches: list[BatchOffset] = []

        def a_plans() -> bool:
            got = BatchOffset.from_json(a.latest_offset(initial, None))
            a_batches.extend([got] if got.ranges else [])
            return bool(got.ranges)

        wait_until(a_plans, what="A's first batch")
    assert set(pending.running_at_revocation) == {0}  # never inside a request
    a_batch = a_batches[0]
    moved = {r.topic_partition for r in a_batch.ranges}
    assert len(moved) == 1 and not moved & b_member.assignment
    for tp in moved:
        assert b._partitions.get(tp) is None  # B kept nothing of it
    # A claimed it anew, after B's claim: its claim is the table's, and its batch lands.
    assert claims_of(DeltaTable(str(table)), group, moved) == a_batch.claim_map()
    assert {r.from_offset for r in a_batch.ranges} == {10}  # where B's batch ended
    land(table, topic, a_batch, group)
    a.latest_offset(a_batch.to_json(), None)
    assert a.ensure_started().committed(sorted(moved)) == {tp: 15 for tp in moved}
    for tp in moved:
        assert offsets_in(table, tp.partition) == list(range(15))


def test_a_range_the_sink_fenced_is_never_committed_and_is_read_again_from_the_table(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
) -> None:
    """Kafka never gets past the sink's table: a zombie's late claim (a member whose session
    ended mid-claim) fences this member's batch of a partition out of the table; the safe
    point leaves that range out of the Kafka commit, and the partition is claimed again and
    read from the table's position."""
    topic, group, table = seeded(bootstrap_servers, make_topic, tmp_path)
    options = source_options(bootstrap_servers, topic, group, table)
    stream = GroupStream(options, for_source(options))
    streams.append(stream)
    batch = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert batch.ends() == {p0: 10, p1: 10}
    claim_tokens.claim(
        str(table), group, [p1], claim_tokens.new_token()
    )  # the zombie's claim lands
    files = write_task(table, [rows(p, range(5, 10), topic) for p in (0, 1)])
    landed = DeltaSink(str(table), group).commit(
        BatchPlan.of(batch.batch, list(batch.ranges), batch.outside, batch.claim_map()),
        files,
        SCHEMA,
    )
    assert landed.fenced == (p1,)

    # The safe point (nothing new to plan: Spark gets batch 0 back), then the next plan.
    assert stream.latest_offset(batch.to_json(), None) == batch.to_json()
    again = BatchOffset.from_json(stream.latest_offset(batch.to_json(), None))
    member = stream.ensure_started()
    assert member.committed([p0, p1]) == {p0: 10, p1: 5}
    assert offsets_in(table, 1) == list(range(5))
    # p1 was claimed anew (the next plan's search) and is read again from the table's 5.
    assert {r.topic_partition: (r.from_offset, r.until_offset) for r in again.ranges} == {
        p1: (5, 10)
    }
    assert claims_of(DeltaTable(str(table)), group, [p1]) == again.claim_map()


def test_a_stop_while_a_revocation_waits_releases_the_revoking_partitions_too(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
) -> None:
    """SIGTERM (``stop``) while the barrier waits for a batch of the revoked partitions: the
    member still holds their claims, so it releases them like any other (found by the crash
    matrix, cell ``revocation``/SIGTERM: the in-flight batch landed after the member left,
    and a plain service read it again from Kafka)."""
    topic, group, table = seeded(bootstrap_servers, make_topic, tmp_path)
    options = source_options(bootstrap_servers, topic, group, table)
    stream = GroupStream(options, for_source(options))
    streams.append(stream)
    batch = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    revoked = frozenset(batch.ends())
    member = stream.ensure_started()
    barrier = threading.Thread(  # as librdkafka runs it: on the member's owner thread
        target=member.call,
        args=(lambda consumer: stream.on_revoked(revoked, member.serve), 60),
        daemon=True,
    )
    barrier.start()  # waits for the batch, which is still "running"
    wait_until(
        lambda: all(
            (s := stream._partitions.get(tp)) is not None and s.status is Status.REVOKING
            for tp in revoked
        ),
        what="the revocation to begin",
    )
    stream.stop()  # what SIGTERM runs
    barrier.join(30)
    assert not barrier.is_alive()
    assert claims_of(DeltaTable(str(table)), group, revoked) == {
        tp: claim_tokens.RELEASED for tp in revoked
    }
    # The batch can no longer land; the group resumes exactly where the table ends.
    files = write_task(table, [rows(p, range(5, 10), topic) for p in (0, 1)])
    landed = DeltaSink(str(table), group).commit(
        BatchPlan.of(batch.batch, list(batch.ranges), batch.outside, batch.claim_map()),
        files,
        SCHEMA,
    )
    assert set(landed.fenced) == revoked
    assert committed(bootstrap_servers, topic, group, revoked) == {tp: 5 for tp in revoked}


class ReleaseNeverLands:
    """The table's arbiter whose release does not land in time (``SinkClaimError``), as on
    a saturated machine where every attempt met another commit: the rest is the real one."""

    def __init__(self, inner: DeltaArbiter) -> None:
        self.inner = inner
        self.path = inner.path
        self.releases = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def release(self, tokens: dict[TopicPartition, int], **_: object) -> None:
        self.releases += 1
        raise SinkClaimError(
            f"sink {self.path}: could not release partitions in 10 s", path=self.path,
            partitions=tokens,
        )  # fmt: skip


def test_a_stop_whose_release_fails_commits_what_the_table_holds_then(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
) -> None:
    """The release of a stop does not land (the rolling benchmark, 20 members on 2 cores:
    it met the member's own last batch committing, and ran out of time after that batch had
    landed). The member still commits the positions the table holds, so the next owner
    does not read the landed batch again (before: it committed nothing, and a plain
    service read 8 records that were in the table)."""
    topic, group, table = seeded(bootstrap_servers, make_topic, tmp_path)
    options = source_options(bootstrap_servers, topic, group, table)
    inner = for_source(options)
    assert inner is not None
    arbiter = ReleaseNeverLands(inner)
    stream = GroupStream(options, arbiter)  # type: ignore[arg-type]
    streams.append(stream)
    batch = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    assert {r.until_offset for r in batch.ranges} == {10}
    # The batch lands while the member stops (its commit beat the release).
    files = write_task(table, [rows(p, range(5, 10), topic) for p in (0, 1)])
    landed = DeltaSink(str(table), group).commit(
        BatchPlan.of(batch.batch, list(batch.ranges), batch.outside, batch.claim_map()),
        files,
        SCHEMA,
    )
    assert not landed.fenced
    stream.stop()
    assert arbiter.releases == 1
    partitions = [TopicPartition(topic, p) for p in (0, 1)]
    assert committed(bootstrap_servers, topic, group, partitions) == {tp: 10 for tp in partitions}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_revocation_pending_during_a_stops_release_runs_after_it(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
    strategy: str,
) -> None:
    """SIGTERM (``stop``) as another consumer joins: the revocation of the very partitions
    being released is pending while the release runs on the owner thread. It is delivered
    after the release's requests, never inside them, and the newcomer starts exactly where
    the table ends. (The crash matrix found this interleaving: SIGTERM at ``planned`` while a
    plain consumer joined.)

    The owner thread's own polls are held back until the release is done, so the rebalance
    is pending through all of it: the interleaving is reached every time."""
    topic, group, table = seeded(bootstrap_servers, make_topic, tmp_path)
    options = source_options(
        bootstrap_servers, topic, group, table, **{"partition.assignment.strategy": strategy}
    )
    stream = GroupStream(options, for_source(options))
    streams.append(stream)
    batch = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    assert {r.until_offset for r in batch.ranges} == {10}
    files = write_task(table, [rows(p, range(5, 10), topic) for p in (0, 1)])
    landed = DeltaSink(str(table), group).commit(  # the batch lands; SIGTERM follows
        BatchPlan.of(batch.batch, list(batch.ranges), batch.outside, batch.claim_map()),
        files,
        SCHEMA,
    )
    assert not landed.fenced
    with PendingRevocation(stream) as pending:
        newcomer = GroupMember(
            {**options.member_config(), "session.timeout.ms": "6000"}, [topic]
        ).start()
        try:
            pending.wait_until_rebalancing(bootstrap_servers, 2)
            stopping = threading.Thread(target=stream.stop)  # what SIGTERM runs
            stopping.start()
            wait_until(lambda: "_stopped" in pending.requests, what="the release's requests")
            assert stream.metrics.revocations == 0  # still pending: no request delivered it
            pending.deliver()
            stopping.join(60)
            assert not stopping.is_alive(), "stop() did not return"
            assert pending.requests[:2] == ["_release_all", "_finished"]
            assert set(pending.running_at_revocation) <= {0}  # never inside a request
            assert stream.metrics.barrier_timeouts == 0
            assert stream.metrics.failed_commits == 0
            partitions = [TopicPartition(topic, p) for p in (0, 1)]
            # The newcomer resumes exactly where the table ends.
            assert committed(bootstrap_servers, topic, group, partitions) == {
                tp: 10 for tp in partitions
            }
        finally:
            newcomer.close()
