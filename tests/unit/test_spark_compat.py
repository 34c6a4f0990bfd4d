"""The adapters on every Spark line (spark_groups.spark.compat): what differs between pyspark
4.0/4.1 (no admission control, no Arrow stream writer) and 4.2+, checked without a JVM.

The lanes of .ci/run run this module on each Spark line; the parts that only one kind of
line can show take the feature as a parameter."""

from __future__ import annotations

import json
import pickle
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.types import StructField, StructType, TimestampType

from spark_groups.errors import OptionNeedsSparkError, UnsupportedSparkError
from spark_groups.offsets import BatchOffset, OffsetRange
from spark_groups.options import parse_options
from spark_groups.sink.spark import rows_as_batches
from spark_groups.sources.kafka_group import KafkaGroupStreamReader, check_for_this_spark
from spark_groups.spark import compat

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "group.id": "g"}


def test_the_version_and_features_agree() -> None:
    assert compat.SPARK_MINOR >= (4, 0)
    assert f"{compat.SPARK_MINOR[0]}.{compat.SPARK_MINOR[1]}" in compat.SUPPORTED
    assert (compat.SPARK_MINOR >= (4, 2)) == compat.ADMISSION_CONTROL
    assert (compat.SPARK_MINOR >= (4, 1)) == compat.ARROW_STREAM_WRITER


def test_without_admission_control_the_source_needs_the_checkpoint() -> None:
    options = parse_options(BASE)
    with pytest.raises(OptionNeedsSparkError) as caught:
        check_for_this_spark(options, admission_control=False)
    assert caught.value.option == "checkpointLocation"
    assert caught.value.spark_version == compat.SPARK_VERSION
    assert compat.SPARK_VERSION in str(caught.value)
    check_for_this_spark(options, admission_control=True)
    check_for_this_spark(
        parse_options({**BASE, "checkpointLocation": "/tmp/cp"}), admission_control=False
    )


class PlanningStandIn:
    """Stands in for GroupStream: records each ``latest_offset`` start, plans batch start+1."""

    def __init__(self) -> None:
        self.starts: list[int] = []

    def ensure_started(self) -> None:
        pass

    def latest_offset(self, start: dict[str, Any], max_records: int | None) -> dict[str, Any]:
        self.starts.append(start["batch"])
        self.max_records = max_records
        n = start["batch"] + 1
        return BatchOffset.of(n, [OffsetRange("t", 0, n * 10, n * 10 + 10)]).to_json()


def reader(tmp_path: Path, **extra: str) -> tuple[KafkaGroupStreamReader, PlanningStandIn]:
    options = parse_options({**BASE, "checkpointLocation": str(tmp_path / "cp"), **extra})
    r = KafkaGroupStreamReader(options)
    stand_in = PlanningStandIn()
    r._stream = stand_in
    return r, stand_in


def test_latest_offset_without_a_start_goes_on_from_the_last_plan(tmp_path: Path) -> None:
    """Spark 4.0 calls latestOffset() first and initialOffset() after it (for batch 0's
    start): that must not take the reader back to the beginning."""
    r, planned = reader(tmp_path, maxOffsetsPerTrigger="25")
    first = r.latestOffset()
    assert r.initialOffset() == BatchOffset.initial(r.options.pipeline).to_json()
    second = r.latestOffset()
    assert (first["batch"], second["batch"]) == (0, 1)
    assert planned.starts == [-1, 0]
    assert planned.max_records == 25  # maxOffsetsPerTrigger, applied by the source itself


def test_a_restarted_reader_stands_where_the_offset_log_ends(tmp_path: Path) -> None:
    r, planned = reader(tmp_path)
    offsets = tmp_path / "cp" / "offsets"
    offsets.mkdir(parents=True)
    for spark_id, ours in [(0, 6), (1, 7)]:
        entry = BatchOffset.of(ours, [OffsetRange("t", 0, ours, ours + 1)]).to_json()
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        (offsets / str(spark_id)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(entry)}")
    assert r.latestOffset()["batch"] == 8
    assert planned.starts == [7]


def test_a_reader_with_an_empty_checkpoint_starts_at_the_beginning(tmp_path: Path) -> None:
    r, planned = reader(tmp_path)
    r.latestOffset()
    assert planned.starts == [-1]


def test_spark_passes_start_and_limit_where_it_has_admission_control(tmp_path: Path) -> None:
    r, planned = reader(tmp_path, maxOffsetsPerTrigger="25")
    start = BatchOffset.of(4, [OffsetRange("t", 0, 0, 5)]).to_json()
    assert r.latestOffset(start, compat.ReadMaxRows(7))["batch"] == 5
    assert planned.starts == [4] and planned.max_records == 7


def test_arrow_types_carry_utc_on_every_line() -> None:
    assert compat.arrow_type(TimestampType()) == pa.timestamp("us", tz="UTC")
    schema = compat.arrow_schema(StructType([StructField("at", TimestampType())]))
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")


def test_rows_become_arrow_batches_with_the_same_instants() -> None:
    """pyspark 4.0's stream writers get rows; timestamps arrive naive, in local time."""
    schema = pa.schema(
        [("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("b", pa.binary())]
    )
    instant = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    rows = [
        Row(id=i, at=instant.astimezone().replace(tzinfo=None), b=bytearray(b"x")) for i in range(3)
    ]
    batches = list(rows_as_batches(iter(rows), schema))
    table = pa.Table.from_batches(batches)
    assert table.column("id").to_pylist() == [0, 1, 2]
    assert table.column("at").to_pylist() == [instant] * 3
    assert table.column("b").to_pylist() == [b"x"] * 3


def test_an_unsupported_spark_is_named_with_the_ones_that_work() -> None:
    error = UnsupportedSparkError("3.5.8", compat.SUPPORTED)
    assert "pyspark 3.5.8 has no Python data source API" in str(error)
    assert "4.0, 4.1, 4.2, 4.3" in str(error) and "spark-groups[spark]" in str(error)
    assert isinstance(error, ImportError)
    again = pickle.loads(pickle.dumps(error))
    assert (again.version, again.supported) == ("3.5.8", compat.SUPPORTED)
    assert "pyspark is not installed" in str(UnsupportedSparkError(None, compat.SUPPORTED))


def test_our_data_sources_keep_planner_workers_from_sending_empty_profilers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark 4.2+ planner workers send the empty UDF-profiler accumulators, and
    ``spark-pipelines run`` then exits 1 (spark_groups.spark.planner_accumulators). Creating
    or unpickling our data sources leaves them out; everything else is still sent."""
    from pyspark.accumulators import (
        AddingAccumulatorParam,
        SpecialAccumulatorIds,
        _accumulatorRegistry,
        _deserialize_accumulator,
    )

    from spark_groups.sink.spark import DeltaGroupDataSource
    from spark_groups.sources.kafka_group import KafkaGroupDataSource

    try:
        import pyspark.sql.worker.utils as planner
    except ImportError:  # Spark 4.0 and 4.1: no planner worker_run, nothing to leave out
        assert not compat.SPARK_VERSION.startswith(("4.2", "4.3"))
        KafkaGroupDataSource(dict(BASE))  # and nothing breaks
        return
    sent: list[dict[int, Any]] = []

    def send(outfile: Any) -> None:  # the worker's own: records what it would send
        sent.append({key: acc._value for key, acc in _accumulatorRegistry.items()})

    monkeypatch.setattr(planner, "send_accumulator_updates", send)
    saved = dict(_accumulatorRegistry)
    try:
        source = KafkaGroupDataSource(dict(BASE))  # the create worker
        pickle.loads(pickle.dumps(source))  # the other workers get it unpickled
        DeltaGroupDataSource({"path": "/t", "group.id": "g", "checkpointLocation": "/c"})
        profiler, profiler_v2 = (
            SpecialAccumulatorIds.SQL_UDF_PROFIER,
            SpecialAccumulatorIds.SQL_UDF_PROFIER_V2,
        )
        _accumulatorRegistry.clear()
        _deserialize_accumulator(profiler, {}, AddingAccumulatorParam({}))
        _deserialize_accumulator(profiler_v2, {}, AddingAccumulatorParam({}))
        _deserialize_accumulator(7, 5, AddingAccumulatorParam(0))
        planner.send_accumulator_updates(None)
        assert sent == [{7: 5}]
        _deserialize_accumulator(profiler, {"udf": "profile"}, AddingAccumulatorParam({}))
        planner.send_accumulator_updates(None)
        assert sent[-1] == {7: 5, profiler: {"udf": "profile"}}  # a profiler still reports
    finally:
        _accumulatorRegistry.clear()
        _accumulatorRegistry.update(saved)
