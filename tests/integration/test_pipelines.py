"""The example pipeline (jobs/pipeline) run with the real ``spark-pipelines`` CLI (Spark 4.1+):
kafka-group into a streaming table and into the delta-group sink, on Apache Kafka.

Each test copies the example into its folder and runs it as a user does
(``support.pipelines``). The lanes of .ci/run run this module on Spark 4.1 and 4.2; the main
suite on 4.3.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_groups.spark.compat import SPARK_VERSION
from spark_groups.tools.cli import main
from spark_groups.tools.spark_jars import DELTA_SQL_CONF, JarsMissingError, jar_conf

from support.broker import committed_offsets, log_end_offsets, produce_ids, wait_until
from support.pipelines import PipelineRun

PARTITIONS = 2
GROUP, SINK_GROUP = "orders-pipeline", "orders-pipeline-delta"

pytestmark = pytest.mark.skipif(
    SPARK_VERSION < "4.1", reason="Spark Declarative Pipelines came with Spark 4.1"
)


@pytest.fixture
def pipeline(bootstrap_servers: str, make_topic, tmp_path: Path) -> PipelineRun:
    return PipelineRun(tmp_path, bootstrap_servers, make_topic(PARTITIONS))


def ran(pipeline: PipelineRun, *args: str) -> None:
    """Run the pipeline; it must exit 0 and say it completed."""
    code = pipeline.run_pipeline(*args)
    assert code == 0 and pipeline.completed(), (code, pipeline.last_log()[-4000:])


def once_each(rows: list[tuple[int, int]], expected: int) -> None:
    counts = Counter(rows)
    assert [r for r, n in counts.items() if n > 1] == [], "rows written twice"
    assert len(counts) == expected, f"{len(counts)} distinct rows, {expected} produced"


def at_log_end(servers: str, topic: str, group: str) -> bool:
    return committed_offsets(servers, group, topic, PARTITIONS) == log_end_offsets(
        servers, topic, PARTITIONS
    )


def test_two_runs_then_a_full_refresh_read_every_record_once(
    pipeline: PipelineRun, bootstrap_servers: str
) -> None:
    """Two runs with new records between read each record once and commit the group to the
    log end. A full refresh then empties the streaming table and gives every flow a new
    checkpoint: the group starts over at startingOffsets, so the table holds everything
    again, once; the delta-group sink keeps its table, which decides where its flow
    resumes: the new records once, the old ones not again."""
    topic = pipeline.env["ORDERS_TOPIC"]
    produce_ids(bootstrap_servers, topic, range(600), PARTITIONS)
    ran(pipeline)
    produce_ids(bootstrap_servers, topic, range(600, 1000), PARTITIONS)
    ran(pipeline)  # the catalog outlived the first run (conf/spark-defaults.conf)
    once_each(pipeline.streaming_table(), 1000)
    once_each(pipeline.delta_table(), 1000)
    for group in (GROUP, SINK_GROUP):  # the reader process commits as the query ends
        wait_until(lambda g=group: at_log_end(bootstrap_servers, topic, g), 60, group)
    described = CliRunner().invoke(
        main, ["describe", GROUP, "-b", bootstrap_servers, "--topic", topic]
    )
    assert described.exit_code == 0, described.output
    assert f"group {GROUP}" in described.output and topic in described.output

    produce_ids(bootstrap_servers, topic, range(1000, 1200), PARTITIONS)
    ran(pipeline, "--full-refresh-all")
    assert "fully refreshed" in pipeline.last_log()  # group.refresh: read again from the start
    once_each(pipeline.streaming_table(), 1200)
    once_each(pipeline.delta_table(), 1200)


def test_a_run_stopped_with_sigterm_after_a_sink_commit_loses_and_duplicates_nothing(
    pipeline: PipelineRun, bootstrap_servers: str, tmp_path: Path
) -> None:
    """A scheduler stops the run (SIGTERM to its process group) exactly after the
    delta-group sink committed its first batch; the next run finishes the job."""
    topic = pipeline.env["ORDERS_TOPIC"]
    produce_ids(bootstrap_servers, topic, range(800), PARTITIONS)
    stop = {"SPARK_GROUPS_CRASH_AT": "sink.committed:SIGTERM"}
    code = pipeline.run_pipeline(env=stop)
    assert code != 0 and not pipeline.completed(), pipeline.last_log()[-4000:]
    assert 0 < len(pipeline.delta_table()) <= 800
    ran(pipeline)
    once_each(pipeline.streaming_table(), 800)
    once_each(pipeline.delta_table(), 800)


def test_a_delta_streaming_table_where_the_line_has_delta_spark(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """The delta lines of the example's conf/spark-defaults.conf (delta-spark's jars and
    catalog, Delta the default format; Spark 4.0 to 4.2): the streaming table is Delta,
    every record once. (Runs after the first, and a full refresh: the test above.)"""
    if compat_delta_spark_missing():
        pytest.skip(compat_delta_spark_missing())
    conf = {**jar_conf("delta-spark"), **DELTA_SQL_CONF, "spark.sql.sources.default": "delta"}
    pipeline = PipelineRun(tmp_path, bootstrap_servers, make_topic(PARTITIONS), conf)
    topic = pipeline.env["ORDERS_TOPIC"]
    produce_ids(bootstrap_servers, topic, range(300), PARTITIONS)
    ran(pipeline)
    assert (pipeline.work / "warehouse" / "orders_raw" / "_delta_log").is_dir()
    once_each(pipeline.streaming_table(), 300)
    once_each(pipeline.delta_table(), 300)


def compat_delta_spark_missing() -> str | None:
    """Why delta-spark cannot run in this Spark's pipeline server here, or None."""
    if not SPARK_VERSION.startswith(("4.0", "4.1", "4.2")):
        return f"delta-spark runs on Spark 4.0 to 4.2 only, not {SPARK_VERSION} (spark-versions.md)"
    try:
        jar_conf("delta-spark")
    except JarsMissingError as exc:
        return str(exc)
    return None
