"""The ingest job's TOML config: the shipped files load, bad files fail with clear errors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ingest_job", ROOT / "jobs" / "ingest.py")
assert _spec is not None and _spec.loader is not None
ingest = importlib.util.module_from_spec(_spec)
sys.modules["ingest_job"] = ingest  # dataclasses look their module up
_spec.loader.exec_module(ingest)

GOOD_SOURCE = """
[source]
"kafka.bootstrap.servers" = "127.0.0.1:9092"
subscribe = "orders"
"group.id" = "orders-etl"
"""
GOOD_SINK = """
[sink]
path = "/tmp/t"
checkpoint = "/tmp/cp"
"""


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return str(path)


def test_the_shipped_configs_load() -> None:
    scheduled = ingest.load_config(str(ROOT / "conf" / "scheduled.toml"))
    assert scheduled.trigger == "availableNow"
    assert scheduled.source["group.instance.id"] == "orders-etl-every-10min"
    assert ingest.load_config(str(ROOT / "conf" / "ingest.toml")).trigger == "availableNow"


def test_the_static_id_can_be_overridden_or_removed(tmp_path: Path) -> None:
    path = config(tmp_path, GOOD_SOURCE + '"group.instance.id" = "a"\n' + GOOD_SINK)
    assert ingest.load_config(path, group_instance_id="b").source["group.instance.id"] == "b"
    assert "group.instance.id" not in ingest.load_config(path, group_instance_id="").source


def test_a_second_member_overrides_checkpoint_and_trigger(tmp_path: Path) -> None:
    path = config(tmp_path, GOOD_SOURCE + GOOD_SINK)
    second = ingest.load_config(path, sink_overrides={"checkpoint": "/tmp/b", "trigger": "5 s"})
    assert (second.checkpoint, second.trigger, second.table_path) == ("/tmp/b", "5 s", "/tmp/t")
    with pytest.raises(ingest.JobConfigError, match="trigger 'soon'"):
        ingest.load_config(path, sink_overrides={"trigger": "soon"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD_SINK, "a [source] section is required"),
        (GOOD_SOURCE, "a [sink] section is required"),
        (GOOD_SOURCE + '[sink]\ncheckpoint = "/tmp/cp"\n', "[sink] path is required"),
        (GOOD_SOURCE + GOOD_SINK + 'trigger = "10 bananas"\n', "[sink] trigger '10 bananas'"),
        (GOOD_SOURCE + GOOD_SINK + 'trigger = ""\n', "[sink] trigger ''"),
        (GOOD_SOURCE + GOOD_SINK + 'triger = "availableNow"\n', "unknown [sink] key(s) ['triger']"),
        (GOOD_SOURCE + GOOD_SINK + "[extra]\n", "unknown section(s) ['extra']"),
        (GOOD_SOURCE + 'subscrib = "x"\n' + GOOD_SINK, "[source] option 'subscrib'"),
        (
            GOOD_SOURCE + '"group.instance.id" = "orders etl/1"\n' + GOOD_SINK,
            "group.instance.id 'orders etl/1' is not a valid static member id",
        ),
        (
            GOOD_SOURCE + '"kafka.group.instance.id" = "' + "x" * 250 + '"\n' + GOOD_SINK,
            "is not a valid static member id",
        ),
        ("[source\n", "not valid TOML"),
        (GOOD_SOURCE + GOOD_SINK + 'shared_mount = "yes"\n', "[sink] shared_mount must be"),
    ],
)
def test_bad_configs_name_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = config(tmp_path, text)
    with pytest.raises(ingest.JobConfigError) as caught:
        ingest.load_config(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(path)


def test_a_missing_file_and_the_exit_status(tmp_path: Path, capsys) -> None:
    assert ingest.main(["--conf", str(tmp_path / "nope.toml")]) == 2
    assert "no such config file" in capsys.readouterr().err


def test_spark_log_level_comes_from_the_file_or_the_flag(tmp_path: Path, capsys) -> None:
    path = config(tmp_path, GOOD_SOURCE + GOOD_SINK)
    assert ingest.load_config(path).spark_log_level == "WARN"
    info = ingest.load_config(path, sink_overrides={"spark_log_level": "info"})
    assert info.spark_log_level == "INFO"
    assert ingest.main(["--conf", path, "--spark-log-level", "LOUD"]) == 2
    assert "spark_log_level 'LOUD' is not a log4j level" in capsys.readouterr().err


def _progress(batch: int, rows: int, ran: bool = True, lag: int = 7) -> dict:
    """A query progress as pyspark gives it (a dict), with one kafka-group source."""
    import json

    from spark_groups.metrics import METRICS_KEY

    metrics = {"member_id": "m", "generation": 2, "assigned_partitions": 3, "rebalances": 1}
    latest = {"orders": {"0": 10}, METRICS_KEY: {**metrics, "lag": lag}}
    # The batch read orders-0 [2, 8) of a log ending at 10: 2 records left after it.
    end = {"v": 1, "batch": batch, "ranges": {"orders": {"0": [2, 8]}}}
    source = {"description": "kafka-group", "latestOffset": json.dumps(latest)}
    if ran:
        source["endOffset"] = json.dumps(end)
    return {
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {"addBatch": 5, "triggerExecution": 9} if ran else {"triggerExecution": 1},
        "sources": [source],
    }


def test_one_line_per_batch_with_records_lag_and_assignment(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert ingest.batch_line(_progress(4, 120)) == (
        "batch 4: 120 records, lag 2, 3 partitions assigned (generation 2, 1 rebalances); "
        "9 ms (addBatch 5)"
    )
    # Without a readable end offset, the coordinator's lag at the plan.
    assert ingest.batch_line(_progress(5, 0, ran=False)).startswith("batch 5: 0 records, lag 7,")
    caplog.set_level("INFO", logger="spark_groups.jobs.ingest")
    # Batch 0 again, and an idle trigger's progress (no addBatch), are not repeated.
    progresses = [_progress(0, 5), _progress(1, 6), _progress(2, 0, ran=False)]
    totals = ingest.RunTotals()
    assert ingest.log_new_batches(progresses, 0, totals) == 1
    assert [r.getMessage() for r in caplog.records] == [ingest.batch_line(_progress(1, 6))]
    assert (totals.records, totals.batches) == (6, 1)
    # The end of the run: one short sentence.
    assert ingest.summary_line(totals, _progress(1, 6)) == (
        "run summary: 6 records in 1 batch, lag 2; 1 rebalance, 0 barrier waits, "
        "0 barrier timeouts, 0 failed commits"
    )


def test_storage_options_and_shared_mount_reach_the_sink(tmp_path: Path) -> None:
    source = GOOD_SOURCE + '"storage.aws_region" = "eu-west-1"\n'
    loaded = ingest.load_config(config(tmp_path, source + GOOD_SINK + "shared_mount = true\n"))
    assert loaded.shared_mount is True
    assert ingest.storage_options(loaded.source) == {"storage.aws_region": "eu-west-1"}
    assert ingest.load_config(config(tmp_path, GOOD_SOURCE + GOOD_SINK)).shared_mount is False
