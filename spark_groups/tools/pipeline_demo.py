"""The example pipeline's demo: embedded broker, sample orders, two pipeline runs, what landed.

``spark-groups pipeline-demo`` (or ``bash jobs/pipeline/demo.sh``) runs ``jobs/pipeline`` with
``spark-pipelines run`` as a user does, twice with new orders between, with
``KAFKA_BOOTSTRAP_SERVERS`` naming the embedded broker, in :data:`WORK` (emptied first).
Output goes to stdout: a command, not library code. docs/pipelines.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from spark_groups.errors import SparkGroupsError
from spark_groups.kafka.client import AdminClient, ConsumerGroupTopicPartitions, Producer
from spark_groups.kafka.client import KafkaTopicPartition as TopicPartition
from spark_groups.kafka.logs import with_logger
from spark_groups.storage.delta import open_table, query
from spark_groups.tools.demo import PARTITIONS, TOPIC, produce_orders, sample_order, source_root
from spark_groups.tools.tansu import EmbeddedBroker

#: The example's work directory (its spec, conf and definitions name it).
WORK = Path("/tmp/spark-groups-pipeline")
#: The example's two consumer groups: the streaming table's and the delta-group sink's.
GROUPS = ("orders-pipeline", "orders-pipeline-delta")
#: Orders produced before the second run.
MORE = 1000


def pipeline_cli() -> str:
    """The ``spark-pipelines`` of the installed pyspark (Spark 4.1+), found without importing
    pyspark (only the adapters do)."""
    import importlib.util
    from importlib.metadata import version

    found = importlib.util.find_spec("pyspark")
    if found is None or not found.submodule_search_locations:
        raise SparkGroupsError("the pipeline demo needs pyspark 4.1 or later")
    cli = Path(next(iter(found.submodule_search_locations))) / "bin" / "spark-pipelines"
    if not cli.is_file():
        raise SparkGroupsError(
            f"pyspark {version('pyspark')} has no spark-pipelines: Spark Declarative Pipelines "
            "came with Spark 4.1"
        )
    return str(cli)


def run_pipeline(cli: str, project: Path, servers: str) -> None:
    """``spark-pipelines run`` of the example, as a user runs it."""
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=servers,
        ORDERS_TOPIC=TOPIC,
        SPARK_CONF_DIR=str(project / "conf"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    spec = project / "spark-pipeline.yml"
    click.echo(f"\n$ SPARK_CONF_DIR={project / 'conf'} spark-pipelines run --spec {spec}\n")
    done = subprocess.run([cli, "run", "--spec", str(spec)], env=env, check=False)
    if done.returncode != 0:
        raise SparkGroupsError(f"spark-pipelines run exited {done.returncode}")


def produce_more(servers: str, first: int) -> None:
    """``MORE`` sample orders, numbered from ``first``."""
    producer = Producer(with_logger({"bootstrap.servers": servers, "linger.ms": "5"}))
    for i in range(first, first + MORE):
        key, value = sample_order(i)
        producer.produce(TOPIC, key=key, value=value)
    producer.flush(30)


def report(servers: str) -> None:
    """Rows in both tables, and where each group's offsets stand."""
    import pyarrow.dataset as pads

    streaming = WORK / "warehouse" / "orders_raw"
    raw = pads.dataset(str(streaming), format="parquet").to_table(["partition", "offset"])
    click.echo(f"\n=== the streaming table orders_raw ({streaming}): {raw.num_rows} rows")
    table = open_table(str(WORK / "tables" / "orders"))
    if table is None:
        raise SparkGroupsError("the pipeline wrote no delta-group table")
    count = 'SELECT count(*) AS n, count(DISTINCT (partition, "offset")) AS d FROM orders'
    rows = query(table, "orders", count).to_pylist()[0]
    click.echo(
        f"=== the delta-group table {WORK / 'tables' / 'orders'}: {rows['n']} rows, "
        f"{rows['d']} distinct Kafka positions"
    )
    admin = AdminClient(with_logger({"bootstrap.servers": servers}))
    for group in GROUPS:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        )
        committed = admin.list_consumer_group_offsets([request])[group].result(30)
        offsets = {tp.partition: tp.offset for tp in committed.topic_partitions}
        click.echo(f"=== consumer group '{group}' committed offsets: {offsets}")


def run_pipeline_demo() -> None:
    """The whole demo; raises :class:`SparkGroupsError` when a step fails."""
    cli = pipeline_cli()
    project = source_root() / "jobs" / "pipeline"
    if not (project / "spark-pipeline.yml").is_file():
        raise SparkGroupsError(
            f"the pipeline demo needs {project} (run it from a source checkout of "
            "spark_groups, or set SPARK_GROUPS_HOME to one)"
        )
    shutil.rmtree(WORK, ignore_errors=True)
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        click.echo(f"embedded broker on {servers}")
        produced = produce_orders(servers)
        click.echo(f"produced {sum(produced.values())} orders to '{TOPIC}': {produced}")
        run_pipeline(cli, project, servers)
        produce_more(servers, sum(produced.values()))
        click.echo(f"\nproduced {MORE} more orders; running the pipeline again")
        run_pipeline(cli, project, servers)
        report(servers)
