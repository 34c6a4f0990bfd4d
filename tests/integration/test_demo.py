"""README command one, end to end: ``spark-groups demo`` (embedded broker, spark-submit of the
ingest job), and ``spark-groups history`` on the tables the real run left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_groups.spark.compat import SPARK_VERSION
from spark_groups.tools.cli import main
from spark_groups.tools.timeline import timeline

from support.pipelines import PORT_FREED_S, port_freed, port_held

pytestmark = pytest.mark.integration


def test_demo_lands_every_order_and_history_shows_who_read_them(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "demo"
    result = CliRunner().invoke(main, ["demo", "--work-dir", str(work)])
    assert result.exit_code == 0, result.output
    # spark-submit writes to the real stdout/stderr: no INFO start-up wall, a line per batch.
    job = "".join(capfd.readouterr())
    assert " INFO SparkContext:" not in job and " INFO Executor:" not in job, job[:3000]
    assert "batch 0: 3000 records, lag 0, 3 partitions assigned" in job, job[-3000:]
    assert "rows: 3000 (produced 3000)" in result.output
    offsets = result.output.split("committed offsets")[1].splitlines()[2:5]
    assert [line.split()[0] for line in offsets] == ["0", "1", "2"]
    for line in offsets:  # partition, kafka, ledger, sink, log end, lag
        _, kafka, ledger, sink, end, lag = line.split()
        assert kafka == ledger == sink == end, line
        assert lag == "0", line

    events = timeline(str(work / "_offsets" / "orders-etl"), "orders-etl")
    batches = [e for e in events if e.kind == "batch"]
    assert sum(e.offsets[1] - e.offsets[0] for e in batches if e.offsets) == 3000
    assigned = {e.partition.partition for e in events if e.kind == "assigned"}
    assert assigned == {0, 1, 2}
    first_batch = min(e.at for e in batches)
    assert all(e.at <= first_batch for e in events if e.kind == "assigned")


@pytest.mark.skipif(SPARK_VERSION < "4.1", reason="Spark Declarative Pipelines came with Spark 4.1")
def test_the_pipeline_demo_lands_every_order_once_in_both_tables() -> None:
    """docs/pipelines.md's one command (``spark-groups pipeline-demo``): the example
    pipeline, run twice by spark-pipelines on the embedded broker (on port 15002, taken in
    turns with the pipeline tests of the test processes beside this one)."""
    with port_held(timeout_s=300):  # another process's run ends within its own 300 s
        result = CliRunner().invoke(main, ["pipeline-demo"])
        port_freed(PORT_FREED_S)  # its Connect server gone before the next run takes the lock
    assert result.exit_code == 0, result.output
    assert "orders_raw" in result.output and ": 4000 rows" in result.output
    assert "4000 rows, 4000 distinct Kafka positions" in result.output
    committed = [
        line.split(": ", 1)[1] for line in result.output.splitlines() if "committed offsets" in line
    ]
    assert len(committed) == 2 and committed[0] == committed[1]  # both groups at the log ends
    offsets = dict(kv.split(": ") for kv in committed[0].strip("{}").split(", "))
    assert sum(int(v) for v in offsets.values()) == 4000
