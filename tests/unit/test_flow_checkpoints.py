"""A Declarative Pipelines flow's checkpoint, as the source finds it (no Spark): the
directory ``flow_checkpoints`` names from the spec, the checkpoint the flow runs in now, and
when a refreshed flow starts over."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_groups import flow_checkpoints  # the public import path
from spark_groups.errors import OptionError
from spark_groups.group import refresh
from spark_groups.offsets import BatchOffset
from spark_groups.options import SourceOptions, in_flow_checkpoint, parse_options
from spark_groups.storage.flow_checkpoints import FLOW_CHECKPOINTS_OPTION, current, find_spec

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "group.id": "g"}


def spec(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spark-pipeline.yml"
    path.write_text(f"name: p\nstorage: file:///data/p/storage/\n{extra}")
    return path


def test_the_directory_of_a_table_flow_and_of_a_sink_flow(tmp_path: Path) -> None:
    written = spec(tmp_path)
    root = "file:///data/p/storage/_checkpoints"
    assert flow_checkpoints("orders_raw", spec=written) == (
        f"{root}/spark_catalog/default/orders_raw/orders_raw"
    )
    assert flow_checkpoints("sales.orders", "backfill", spec=written) == (
        f"{root}/spark_catalog/sales/orders/backfill"
    )
    assert flow_checkpoints("orders_delta", "to_delta", sink=True, spec=written) == (
        f"{root}/orders_delta/to_delta"
    )
    named = spec(tmp_path / "named", "catalog: main\ndatabase: bronze\n")
    assert flow_checkpoints("orders_raw", spec=named) == (
        f"{root}/main/bronze/orders_raw/orders_raw"
    )


def test_the_spec_is_found_as_spark_pipelines_finds_it(tmp_path: Path, monkeypatch) -> None:
    written = spec(tmp_path)
    (tmp_path / "transformations").mkdir()
    monkeypatch.chdir(tmp_path / "transformations")
    assert find_spec() == written
    assert flow_checkpoints("t").endswith("/default/t/t")
    (tmp_path / "spark-pipeline.yaml").write_text("name: q\n")
    with pytest.raises(OptionError, match="keep one"):
        find_spec()


def test_names_this_helper_cannot_read_are_refused(tmp_path: Path) -> None:
    written = spec(tmp_path)
    for bad, sink in (("`odd name`", False), ("a.b.c.d", False), ("s.x", True), ("", False)):
        with pytest.raises(OptionError) as caught:
            flow_checkpoints(bad, sink=sink, spec=written)
        assert caught.value.option == FLOW_CHECKPOINTS_OPTION
    with pytest.raises(OptionError, match=r"no spark-pipeline\.yml"):
        find_spec(tmp_path.parent / "nowhere-near-a-spec")


def test_the_flow_runs_in_its_highest_numbered_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "_checkpoints" / "orders" / "orders"
    assert current(str(root)).path == f"{root}/0" and current(str(root)).refresh == 0
    for name in ("0", "2", "10", "notes"):
        (root / name).mkdir(parents=True)
    (root / "11").write_text("a file, not a checkpoint")
    found = current(str(root))
    assert (found.path, found.refresh) == (f"{root}/10", 10)


def test_the_source_takes_the_flows_checkpoint_when_its_query_starts(tmp_path: Path) -> None:
    root = tmp_path / "flow"
    options = parse_options({**BASE, FLOW_CHECKPOINTS_OPTION: str(root)})
    assert options.checkpoint is None and options.flow_checkpoints == str(root)
    (root / "0").mkdir(parents=True)
    (root / "1").mkdir()  # a full refresh made it
    started = in_flow_checkpoint(options)
    assert started.checkpoint == str(root / "1") and started.flow_refresh == 1
    assert started.pipeline.checkpoint == str(root / "1")  # what the sink checks
    assert in_flow_checkpoint(parse_options(BASE)) == parse_options(BASE)
    with pytest.raises(OptionError) as caught:
        parse_options({**BASE, FLOW_CHECKPOINTS_OPTION: str(root), "checkpointLocation": "/c"})
    assert caught.value.option == FLOW_CHECKPOINTS_OPTION


def starts_over(options: SourceOptions, start: BatchOffset) -> bool:
    flow = refresh.of(options.flow_refresh, options.checkpoint, options.group_id, options.sink_path)
    return flow is not None and flow.starts_over(start)


def test_only_a_refreshed_flow_without_a_batch_or_a_sink_table_starts_over(tmp_path) -> None:
    root = tmp_path / "flow"
    (root / "1").mkdir(parents=True)
    refreshed = in_flow_checkpoint(parse_options({**BASE, FLOW_CHECKPOINTS_OPTION: str(root)}))
    first = BatchOffset.initial()
    assert starts_over(refreshed, first)
    assert not starts_over(refreshed, BatchOffset.of(0, []))  # its first batch is planned
    sink = {**BASE, FLOW_CHECKPOINTS_OPTION: str(root), "sink.table": str(tmp_path / "t")}
    assert not starts_over(in_flow_checkpoint(parse_options(sink)), first)
    (tmp_path / "new" / "0").mkdir(parents=True)
    fresh = parse_options({**BASE, FLOW_CHECKPOINTS_OPTION: str(tmp_path / "new")})
    assert not starts_over(in_flow_checkpoint(fresh), first)  # never refreshed
