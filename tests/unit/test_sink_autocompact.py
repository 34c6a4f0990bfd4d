"""compactEvery: the sink compacts its table after the commit that is a multiple of N."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_groups.errors import OptionError
from spark_groups.options.sink import SinkOptions, parse_sink_options
from spark_groups.sink.autocompact import compact_if_due
from spark_groups.sink.live_maintenance import release_lease, take_lease


def small_files(path: Path, n: int) -> None:
    for i in range(n):
        write_deltalake(str(path), pa.table({"offset": pa.array([i], pa.int64())}), mode="append")


def test_compacts_only_at_a_multiple_and_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "t"
    small_files(path, 6)  # versions 0..5
    options = SinkOptions(str(path), "g", str(tmp_path / "cp"), member="m", compact_every=5)
    assert not compact_if_due(options, str(path), 4)
    assert not compact_if_due(options, str(path), None)  # nothing committed: nothing to count
    assert len(DeltaTable(str(path)).file_uris()) == 6
    assert compact_if_due(options, str(path), 5)
    table = DeltaTable(str(path))
    assert len(table.file_uris()) == 1
    assert sorted(table.to_pyarrow_dataset().to_table().column("offset").to_pylist()) == list(
        range(6)
    )
    assert not compact_if_due(SinkOptions(str(path), "g", "cp", compact_every=0), str(path), 10)


def test_a_taken_lease_skips_the_turn_without_failing_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "t"
    small_files(path, 4)
    until_ms = take_lease(str(path), None, "optimize:ops@host")
    options = SinkOptions(str(path), "g", "cp", member="m", compact_every=2)
    try:
        assert not compact_if_due(options, str(path), 4)
        assert len(DeltaTable(str(path)).file_uris()) == 4
    finally:
        release_lease(str(path), None, "optimize:ops@host", until_ms)


def test_the_option_is_a_count_of_versions(tmp_path: Path) -> None:
    base = {"path": str(tmp_path / "t"), "group.id": "g", "checkpointLocation": str(tmp_path)}
    assert parse_sink_options({**base, "compactevery": "100"}).compact_every == 100
    assert parse_sink_options(base).compact_every == 0
    with pytest.raises(OptionError, match="number of table versions") as caught:
        parse_sink_options({**base, "compactEvery": "-1"})
    assert caught.value.option == "compactEvery"
