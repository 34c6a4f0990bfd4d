"""Helpers shared by the integration tests (producing, options, polling, the sink table's
ids); the crash and chaos tests import them too."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, QueryBuilder

from spark_groups.tools.spark_jars import JarsMissingError, spark_jars

#: Group settings that make joins fast on the embedded broker (it waits ~half the session
#: timeout before completing a join) and a lost member's partitions move soon on any broker.
#: KIP-848 (group.protocol=consumer) takes both from the broker, which the tests' Kafka sets
#: alike (spark_groups.tools.kafka_broker).
FAST_GROUP = {"kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}

#: The ways a group assigns partitions that the tests run through: the classic protocol's
#: client-side assignors, eager and cooperative, and KIP-848's broker-side assignment.
ASSIGNMENTS = ("range", "cooperative-sticky", "consumer")


def assignment_options(assignment: str) -> dict[str, str]:
    """Source options for one of :data:`ASSIGNMENTS`."""
    if assignment == "consumer":
        return {"group.protocol": "consumer"}
    return {"partition.assignment.strategy": assignment}


def plain_consumer_config(servers: str, group: str, assignment: str) -> dict[str, str]:
    """A plain confluent-kafka member of the same group, speaking the same protocol."""
    config = {"bootstrap.servers": servers, "group.id": group}
    if assignment == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {
                "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "500",
                "partition.assignment.strategy": assignment,
            }
        )
    return config


def group_options(servers: str, topic: str, group: str, ledger: str | None, **extra: str) -> dict:
    """Options for a kafka-group source on ``topic`` reading from earliest."""
    opts = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "group.id": group,
        "startingOffsets": "earliest",
    }
    if extra.get("group.protocol") != "consumer":
        opts.update(FAST_GROUP)
    if ledger:
        opts["offsets.table"] = ledger
    opts.update(extra)
    return opts


def delta_spark_here() -> bool:
    """Whether this session can carry delta-spark: its Python package is installed (it
    declares the pyspark versions it runs on) and its jars for this Spark line are fetched."""
    if importlib.util.find_spec("delta") is None:
        return False
    try:
        spark_jars("delta-spark")
    except JarsMissingError:
        return False
    return True


def _admission_control() -> bool:
    from spark_groups.spark.compat import ADMISSION_CONTROL

    return ADMISSION_CONTROL


#: For a test whose query needs several batches in one ``Trigger.AvailableNow`` run: Spark 4.0
#: and 4.1 run AvailableNow on a Python source as one batch (docs/spark-versions.md; that
#: behaviour has tests of its own: test_source.py's maxOffsetsPerTrigger test).
needs_available_now = pytest.mark.skipif(
    not _admission_control(),
    reason="Spark before 4.2 runs Trigger.AvailableNow as one batch (docs/spark-versions.md)",
)


def source(spark: Any, opts: dict, checkpoint: Path | str) -> Any:
    """A kafka-group stream of ``opts`` for the query whose checkpoint is ``checkpoint``.

    Spark before 4.2 does not tell a Python source where a restarted query stands: the source
    needs the query's ``checkpointLocation`` there (docs/spark-versions.md), as a user's
    would. On 4.2 and later it is left out, so the tests see the default behaviour."""
    from spark_groups.spark.compat import ADMISSION_CONTROL

    if not ADMISSION_CONTROL and "checkpointLocation" not in opts:
        opts = {**opts, "checkpointLocation": str(checkpoint)}
    return spark.readStream.format("kafka-group").options(**opts).load()


def table_ids(table: Path | str, storage_options: Mapping[str, str] | None = None) -> list[int]:
    """Every id in the newest version of the table (duplicates kept), via delta-rs."""
    dt = DeltaTable(str(table), storage_options=storage_options)
    reader = QueryBuilder().register("t", dt).execute("SELECT id FROM t")
    return pa.table(reader.read_all()).column("id").to_pylist()


class FlowingProducer(threading.Thread):
    """Produces ids 0..total-1 round-robin over partitions, at a steady pace."""

    def __init__(
        self,
        servers: str,
        topic: str,
        partitions: int,
        total: int,
        per_s: int,
        config: dict[str, str] | None = None,
    ):
        super().__init__(daemon=True)
        self.config = config or {}
        self.servers, self.topic, self.partitions = servers, topic, partitions
        self.total, self.per_s = total, per_s
        self.done = threading.Event()

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.servers, "linger.ms": "5", **self.config})
        try:
            for i in range(self.total):
                data = str(i).encode()
                producer.produce(self.topic, key=data, value=data, partition=i % self.partitions)
                if i % 10 == 9:
                    producer.flush(10)
                    time.sleep(10 / self.per_s)
            producer.flush(30)
        finally:
            self.done.set()
