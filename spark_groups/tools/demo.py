"""The end-to-end demo (README command one): embedded broker, sample orders, the ingest job.

``spark-groups demo`` (or ``bash jobs/demo.sh``) starts the embedded broker, produces sample
orders to ``orders``, runs ``jobs/ingest.py`` through ``spark-submit`` with
``conf/ingest.toml``, then prints the rows that landed and the group's committed offsets in
Kafka and the ledger. The job and its configuration are found beside this package or in
``$SPARK_GROUPS_HOME``; work files go to :data:`WORK`, or to another directory given to
:func:`run_demo` (the configuration copied there). Output goes to stdout: a command, not
library code.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from spark_groups.errors import SparkGroupsError
from spark_groups.kafka.client import (
    AdminClient,
    ConsumerGroupTopicPartitions,
    NewTopic,
    Producer,
)
from spark_groups.kafka.client import KafkaTopicPartition as TopicPartition
from spark_groups.kafka.logs import with_logger
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import TopicPartition as TP
from spark_groups.sink.group_commit import committed_positions
from spark_groups.storage.delta import open_table, query
from spark_groups.tools.checkout import checkout_root
from spark_groups.tools.tansu import EmbeddedBroker


def source_root() -> Path:
    """Where ``jobs/`` and ``conf/`` are (:func:`~spark_groups.tools.checkout.checkout_root`)."""
    return checkout_root()


WORK = Path("/tmp/spark-groups-demo")
TOPIC, GROUP, PARTITIONS, ORDERS = "orders", "orders-etl", 3, 3000


def sample_order(i: int) -> tuple[bytes, bytes]:
    """The key (customer) and JSON value of sample order number ``i``."""
    order: dict[str, Any] = {"order_id": i, "customer": f"c{i % 97}", "amount": 5 + (i * 7) % 300}
    return order["customer"].encode(), json.dumps(order).encode()


def serve_broker(port: int, topic: str, partitions: int, rate: int) -> None:
    """Run an embedded broker on ``port`` until Ctrl-C (SIGINT); create ``topic`` and
    produce ``rate`` sample orders per second to it (``spark-groups broker``)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # Ctrl-C or kill stop it, also when started in the background (where SIGINT is ignored).
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    with EmbeddedBroker(port=port) as broker:
        servers = broker.bootstrap_servers
        if topic:
            admin = AdminClient(with_logger({"bootstrap.servers": servers}))
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
            del admin  # released now, not after the broker is gone
        click.echo(
            f"broker on {servers}; topic {topic!r} ({partitions} partitions); "
            f"{rate} sample orders/s; Ctrl-C stops it (its data is gone then)"
        )
        producer = Producer(with_logger({"bootstrap.servers": servers, "linger.ms": "5"}))
        sent = 0
        try:
            while True:
                started = time.monotonic()
                for _ in range(rate if topic else 0):
                    key, value = sample_order(sent)
                    producer.produce(topic, key=key, value=value)
                    sent += 1
                producer.flush(10)
                time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        except KeyboardInterrupt:
            pass
        finally:
            producer.flush(10)
            del producer  # released before the broker stops
        click.echo(f"stopped after producing {sent} orders")


def produce_orders(servers: str) -> dict[int, int]:
    """Create the topic and produce sample orders; return records per partition."""
    admin = AdminClient(with_logger({"bootstrap.servers": servers}))
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer(with_logger({"bootstrap.servers": servers, "linger.ms": "5"}))
    counts = dict.fromkeys(range(PARTITIONS), 0)

    def delivered(error: object, message: object) -> None:
        if error is None:
            counts[message.partition()] += 1  # type: ignore[attr-defined]

    for i in range(ORDERS):
        key, value = sample_order(i)
        producer.produce(TOPIC, key=key, value=value, on_delivery=delivered)
        if i % 700 == 0:
            producer.flush(30)  # several record batches of different sizes per partition
    producer.flush(30)
    return counts


def check_setup() -> tuple[str, Path, Path]:
    """``spark-submit``, the job and its config; raises :class:`SparkGroupsError` naming what
    is missing."""
    job, conf = source_root() / "jobs" / "ingest.py", source_root() / "conf" / "ingest.toml"
    for needed in (job, conf, source_root() / "conf" / "log4j2.properties"):
        if not needed.is_file():
            raise SparkGroupsError(
                f"the demo needs {needed} (run it from a source checkout of spark_groups, "
                "or set SPARK_GROUPS_HOME to one)"
            )
    submit = shutil.which("spark-submit")
    if submit is None:
        raise SparkGroupsError("the demo needs spark-submit on PATH (pip install pyspark)")
    return submit, job, conf


def spark_log_options() -> list[str]:
    """spark-submit arguments that load ``conf/log4j2.properties`` (Spark at WARN), or, with
    ``SPARK_GROUPS_SPARK_LOG_LEVEL`` set (e.g. ``info``), that level for Spark's loggers."""
    java = f"-Dlog4j2.configurationFile={source_root() / 'conf' / 'log4j2.properties'}"
    level = os.environ.get("SPARK_GROUPS_SPARK_LOG_LEVEL", "").strip()
    if level:
        java += f" -Dspark_groups.spark.level={level}"
    return ["--driver-java-options", java]


def run_job(servers: str, submit: str, job: Path, conf: Path) -> None:
    """Run the ingest job through spark-submit, as in production."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [
        submit,
        "--master", "local[2]",
        "--driver-memory", "1g",
        "--conf", "spark.ui.enabled=false",
        *spark_log_options(),
        str(job),
        "--conf", str(conf),
        "--bootstrap-servers", servers,
    ]  # fmt: skip
    level = os.environ.get("SPARK_GROUPS_SPARK_LOG_LEVEL", "").strip()
    if level:
        cmd += ["--spark-log-level", level]
    click.echo(f"\n$ {' '.join(cmd)}\n")
    try:
        subprocess.run(cmd, check=True, env=env)
    except subprocess.CalledProcessError as exc:
        raise SparkGroupsError(f"the ingest job failed with exit status {exc.returncode}") from None


def report(servers: str, produced: dict[int, int], work: Path = WORK) -> None:
    """Print what landed and where the group's offsets are."""
    path = work / "tables" / "orders"
    table = open_table(str(path))
    if table is None:
        raise SparkGroupsError(f"the ingest job wrote no table at {path}")

    def sql(text: str) -> list[dict]:
        return query(table, "orders", text).to_pylist()

    total = sql("SELECT count(*) AS n FROM orders")[0]["n"]
    click.echo(f"\n=== landed in the Delta table {path}")
    click.echo(f"rows: {total} (produced {sum(produced.values())})")
    for row in sql("SELECT partition, count(*) AS n FROM orders GROUP BY partition ORDER BY 1"):
        click.echo(f"  partition {row['partition']}: {row['n']} rows")
    first = 'SELECT topic, partition, "offset", value FROM orders ORDER BY 2, 3 LIMIT 3'
    for row in sql(first):
        click.echo(
            f"  {row['topic']}-{row['partition']}@{row['offset']}: {bytes(row['value']).decode()}"
        )

    admin = AdminClient(with_logger({"bootstrap.servers": servers}))
    request = ConsumerGroupTopicPartitions(
        GROUP, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    )
    committed = admin.list_consumer_group_offsets([request])[GROUP].result(30)
    ledger = OffsetLedger(str(work / "_offsets" / GROUP), GROUP).latest_positions()
    in_sink = committed_positions(str(path), GROUP, [TP(TOPIC, p) for p in range(PARTITIONS)])
    click.echo(f"\n=== consumer group '{GROUP}' committed offsets")
    click.echo(
        "  partition  kafka(__consumer_offsets)  ledger(Delta)  sink(Delta txn)  log-end  lag"
    )
    for tp in committed.topic_partitions:
        in_ledger = ledger.get(TP(TOPIC, tp.partition))
        sink_next = in_sink.get(TP(TOPIC, tp.partition))
        end = produced[tp.partition]
        lag = end - tp.offset
        click.echo(
            f"  {tp.partition:>9}  {tp.offset:>25}  {in_ledger!s:>13}  {sink_next!s:>15}  "
            f"{end:>7}  {lag:>3}"
        )


def run_demo(work: Path | None = None) -> None:
    """Run the whole demo in ``work`` (default :data:`WORK`, emptied first); raises
    :class:`SparkGroupsError` when a step fails."""
    submit, job, conf = check_setup()
    work = Path(work) if work is not None else WORK
    shutil.rmtree(work, ignore_errors=True)
    if work != WORK:
        work.mkdir(parents=True)
        text = conf.read_text().replace(str(WORK), str(work))
        conf = work / "ingest.toml"
        conf.write_text(text)
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        click.echo(f"embedded broker on {servers}")
        produced = produce_orders(servers)
        click.echo(f"produced {sum(produced.values())} orders to '{TOPIC}': {produced}")
        run_job(servers, submit, job, conf)
        report(servers, produced, work)
