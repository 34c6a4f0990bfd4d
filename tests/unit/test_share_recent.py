"""RecentOffsets: the share commits' offsets of a table's newest commits (a real Delta table)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import OffsetSet, PartitionOffsets
from spark_groups.sink.share_info import RecentOffsets, commit_offsets_info

P0, P1 = TopicPartition("q", 0), TopicPartition("q", 1)


def offsets(tp: TopicPartition, start: int, end: int) -> PartitionOffsets:
    return PartitionOffsets({tp: OffsetSet([(start, end)])})


def commit(table: DeltaTable, written: PartitionOffsets | None) -> None:
    """A commit of the sink (a share commit when ``written``), as the table's newest."""
    info = commit_offsets_info(written) if written is not None else {"other": "x"}
    table.create_write_transaction(
        [], "append", table.schema(), commit_properties=CommitProperties(custom_metadata=info)
    )
    table.update_incremental()


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    write_deltalake(str(tmp_path), pa.table({"id": pa.array([], pa.int64())}))
    return DeltaTable(str(tmp_path))


def test_a_redelivered_offset_is_found_in_the_commit_that_wrote_it(table: DeltaTable) -> None:
    recent = RecentOffsets(window=10)
    commit(table, offsets(P0, 0, 100))
    commit(table, None)
    commit(table, offsets(P1, 0, 5) | offsets(P0, 100, 150))
    recent.refresh(table)
    batch = offsets(P0, 140, 160) | offsets(P1, 4, 6)
    assert dict(recent.already_written(batch)) == {
        P0: OffsetSet([(140, 150)]), P1: OffsetSet([(4, 5)]),
    }  # fmt: skip
    assert not recent.already_written(offsets(P0, 150, 200))


def test_only_the_newest_commits_are_searched_and_refresh_reads_only_new_ones(
    table: DeltaTable,
) -> None:
    recent = RecentOffsets(window=3)
    commit(table, offsets(P0, 0, 10))  # version 1
    recent.refresh(table)
    assert recent.already_written(offsets(P0, 0, 1))
    for n in range(3):  # versions 2 to 4: version 1 leaves the window
        commit(table, offsets(P0, 10 + n, 11 + n))
    recent.refresh(table)
    assert not recent.already_written(offsets(P0, 0, 10))
    assert dict(recent.already_written(offsets(P0, 0, 20))) == {P0: OffsetSet([(10, 13)])}


def test_a_window_counts_commits_not_time(table: DeltaTable) -> None:
    """Nothing leaves the window while nothing is committed (a query that is down)."""
    recent = RecentOffsets(window=2)
    commit(table, offsets(P0, 0, 10))
    recent.refresh(table)
    recent.refresh(table)
    assert recent.already_written(offsets(P0, 5, 6))
