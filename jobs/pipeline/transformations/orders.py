"""The example pipeline's flows (docs/pipelines.md).

* ``orders_raw``: a streaming table of every order, read by the consumer group
  ``orders-pipeline``;
* ``orders_delta``: a ``delta-group`` sink, fed by its own group ``orders-pipeline-delta``:
  each record lands in the Delta table exactly once, across runs, restarts and full
  refreshes.

The Kafka cluster and topic come from the environment (``KAFKA_BOOTSTRAP_SERVERS``,
``ORDERS_TOPIC``); everything else lives under ``/tmp/spark-groups-pipeline``. The streaming
table is in the session's default format: Parquet, or Delta where the pipeline's Spark has
delta-spark (Spark 4.0 to 4.2: the delta lines of conf/spark-defaults.conf).
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

import spark_groups
from spark_groups import flow_checkpoints

spark = SparkSession.active()  # Spark 4.2+ also hands definitions files `spark`; 4.1 does not
spark_groups.register(spark)

WORK = "/tmp/spark-groups-pipeline"
KAFKA = {
    "kafka.bootstrap.servers": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
    "subscribe": os.environ.get("ORDERS_TOPIC", "orders"),
    "startingOffsets": "earliest",
    # As the ingest job's (conf/ingest.toml): a run that dies is out of the group in 10 s,
    # and on the embedded broker, which completes a join in about half the session timeout,
    # each run joins in 5 s instead of 23 (docs/brokers.md).
    "kafka.session.timeout.ms": "10000",
}
#: The exactly-once Delta table (written by delta-rs in the driver: no delta-spark needed).
ORDERS_TABLE = f"{WORK}/tables/orders"
COLUMNS = (
    "cast(key AS string) AS customer",
    "cast(value AS string) AS order_json",
    "topic",
    "partition",
    "offset",
    "timestamp",
)


def orders(group: str, **options: str):
    """The orders as the consumer group ``group`` reads them, with its own ledger."""
    return (
        spark.readStream.format("kafka-group")
        .options(**KAFKA)
        .option("group.id", group)
        .option("offsets.table", f"{WORK}/ledgers/{group}")
        .options(**options)
        .load()
        .selectExpr(*COLUMNS)
    )


@dp.table(comment="Every order as Kafka holds it, read by the consumer group orders-pipeline.")
def orders_raw():
    return orders(
        "orders-pipeline", **{"pipelines.flowCheckpoints": flow_checkpoints("orders_raw")}
    )


# The sink's table and group are the source's (sink.table, group.id): said once.
dp.create_sink("orders_delta", format="delta-group", options={})


@dp.append_flow(target="orders_delta")
def orders_to_delta():
    return orders(
        "orders-pipeline-delta",
        **{
            "sink.table": ORDERS_TABLE,
            "pipelines.flowCheckpoints": flow_checkpoints(
                "orders_delta", "orders_to_delta", sink=True
            ),
        },
    )
