"""Claims in the sink's table: a member that gives a partition up fences its in-flight batch.

The race of a graceful stop, made deterministic: the sink decides a batch, then (at the crash
point ``sink.commit_in_flight``) the member releases the partition, and only then does the
sink's Delta commit run. The release must win by construction: the sink's commit conflicts,
its new decision sees the claim moved on and leaves the partition out, and the position the
release read is the table's final one. Real Delta tables, no Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_groups import crash_points
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.sink import claim_tokens
from spark_groups.sink.group_commit import DeltaSink
from spark_groups.sink.plan import BatchPlan

from sink_support import SCHEMA, TOPIC, offsets_in, parquet_files, rows, write_task

TP0 = TopicPartition(TOPIC, 0)
TP1 = TopicPartition(TOPIC, 1)


def sink(table: Path, member: str = "m") -> DeltaSink:
    return DeltaSink(str(table), "g1", member=member)


def plan(batch: int, ranges: dict[int, tuple[int, int]], token: int | None) -> BatchPlan:
    claimed = {TopicPartition(TOPIC, p): token for p in ranges} if token is not None else None
    return BatchPlan.of(
        batch, [OffsetRange(TOPIC, p, lo, hi) for p, (lo, hi) in ranges.items()], (), claimed
    )


def first_batch(table: Path) -> None:
    """The table with offsets 0..9 of partitions 0 and 1 (no claims)."""
    files = write_task(table, [rows(0, range(10)), rows(1, range(10))])
    sink(table).commit(plan(0, {0: (0, 10), 1: (0, 10)}, None), files, SCHEMA)


def test_claim_reads_positions_and_release_is_compare_and_set(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert claim_tokens.claim(str(table), "g1", [TP0], 5) is None  # no table yet: nothing to claim
    first_batch(table)
    got = claim_tokens.claim(str(table), "g1", [TP0, TP1], 5)
    assert got is not None and got.positions == {TP0: 10, TP1: 10}
    assert claim_tokens.claims_of(DeltaTable(str(table)), "g1", [TP0, TP1]) == {TP0: 5, TP1: 5}
    # Another owner claims partition 1: a release under the old token leaves it alone.
    claim_tokens.claim(str(table), "g1", [TP1], 6)
    released = claim_tokens.release(str(table), "g1", {TP0: 5, TP1: 5})
    assert released is not None
    assert released.positions == {TP0: 10} and released.not_mine == (TP1,)
    assert claim_tokens.claims_of(DeltaTable(str(table)), "g1", [TP0, TP1]) == {
        TP0: claim_tokens.RELEASED,
        TP1: 6,
    }


@pytest.mark.parametrize("order", ["release-first", "sink-first"])
def test_a_release_during_the_sinks_commit_settles_it_one_way(tmp_path: Path, order: str) -> None:
    table = tmp_path / "t"
    first_batch(table)
    claim_tokens.claim(str(table), "g1", [TP0, TP1], 7)
    files = write_task(table, [rows(0, range(10, 20)), rows(1, range(10, 20))])
    released: list[claim_tokens.Claimed | None] = []

    def at(point: str) -> None:
        if point == "sink.commit_in_flight" and order == "release-first" and not released:
            released.append(claim_tokens.release(str(table), "g1", {TP0: 7}))

    with crash_points.installed(at):
        result = sink(table).commit(plan(1, {0: (10, 20), 1: (10, 20)}, 7), files, SCHEMA)
    if order == "sink-first":
        released.append(claim_tokens.release(str(table), "g1", {TP0: 7}))
    settled = released[0]
    assert settled is not None
    if order == "release-first":
        # The sink's first commit conflicted with the release; its second decision left
        # partition 0 out. The release's position is the table's: nothing of batch 1 there.
        assert result.fenced == (TP0,) and result.attempts == 2
        assert settled.positions == {TP0: 10} and offsets_in(table, 0) == list(range(10))
    else:
        assert result.fenced == () and settled.positions == {TP0: 20}
        assert offsets_in(table, 0) == list(range(20))
    assert offsets_in(table, 1) == list(range(20))  # the partition still claimed is written
    # Whatever the order, the table's position is what the next owner starts from; where
    # partition 0 was fenced, the task's file (rows of both) was rewritten without its rows.
    assert (
        DeltaTable(str(table)).transaction_version(
            f"spark_groups:{DeltaTable(str(table)).metadata().id}:{TOPIC}:0:g1"
        )
        == settled.positions[TP0]
    )
    assert ({f.path for f in files} <= parquet_files(table)) == (order == "sink-first")


def test_a_batch_decided_after_the_release_is_fenced_too(tmp_path: Path) -> None:
    table = tmp_path / "t"
    first_batch(table)
    claim_tokens.claim(str(table), "g1", [TP0], 7)
    claim_tokens.release(str(table), "g1", {TP0: 7})
    files = write_task(table, [rows(0, range(10, 20))])
    result = sink(table).commit(plan(1, {0: (10, 20)}, 7), files, SCHEMA)
    assert result.version is None and result.fenced == (TP0,) and result.attempts == 1
    assert offsets_in(table, 0) == list(range(10))
    assert not {f.path for f in files} & parquet_files(table)


def test_a_new_owners_claim_fences_a_zombie_and_its_release(tmp_path: Path) -> None:
    """A member whose session expired (a zombie) still has a batch in flight when the next
    owner claims the partition: the zombie's batch cannot land, its release claims nothing,
    and the next owner's batch writes from the position its claim read."""
    table = tmp_path / "t"
    first_batch(table)
    claim_tokens.claim(str(table), "g1", [TP0], 7)  # the zombie, before it froze
    zombie_files = write_task(table, [rows(0, range(10, 20))])
    claimed: list[claim_tokens.Claimed | None] = []

    def at(point: str) -> None:
        if point == "sink.commit_in_flight" and not claimed:
            claimed.append(claim_tokens.claim(str(table), "g1", [TP0], 8))

    with crash_points.installed(at):
        zombie = sink(table, "zombie").commit(plan(5, {0: (10, 20)}, 7), zombie_files, SCHEMA)
    assert zombie.fenced == (TP0,)
    assert claimed[0] is not None and claimed[0].positions == {TP0: 10}
    late = claim_tokens.release(str(table), "g1", {TP0: 7})
    assert late is not None and late.positions == {} and late.not_mine == (TP0,)
    ours = write_task(table, [rows(0, range(10, 25))])
    result = sink(table, "next").commit(plan(1, {0: (10, 25)}, 8), ours, SCHEMA)
    assert result.fenced == () and offsets_in(table, 0) == list(range(25))


def test_a_plan_without_a_token_and_a_table_without_a_claim_write_as_before(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t"
    first_batch(table)
    # A token the table never saw (written before claims existed): written.
    files = write_task(table, [rows(0, range(10, 15))])
    assert sink(table).commit(plan(1, {0: (10, 15)}, 9), files, SCHEMA).fenced == ()
    # No token on a claimed partition (a checkpoint from before claims): written.
    claim_tokens.claim(str(table), "g1", [TP0], 9)
    files = write_task(table, [rows(0, range(15, 20))])
    assert sink(table).commit(plan(2, {0: (15, 20)}, None), files, SCHEMA).fenced == ()
    assert offsets_in(table, 0) == list(range(20))
