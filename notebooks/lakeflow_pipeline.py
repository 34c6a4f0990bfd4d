# Databricks notebook source
# MAGIC %md
# MAGIC # The example pipeline on Databricks Lakeflow Declarative Pipelines
# MAGIC
# MAGIC The definitions of `jobs/pipeline/transformations/orders.py`, for a Lakeflow pipeline:
# MAGIC Kafka orders read as the consumer group `orders-pipeline` into a streaming table, and
# MAGIC exactly once into a Delta table through the `delta-group` sink. What differs from Spark's
# MAGIC own `spark-pipelines` (docs/pipelines.md, "Lakeflow"):
# MAGIC
# MAGIC * Add this file to a pipeline as a source file; Databricks runs it, hands it `spark`, and
# MAGIC   keeps the catalog (Unity Catalog) and the checkpoints itself: no spec, no
# MAGIC   `spark-defaults.conf`.
# MAGIC * Install `spark-groups` in the pipeline's environment (its dependencies:
# MAGIC   `spark-groups`, without extras: the runtime brings pyspark).
# MAGIC * Settings come from the pipeline's configuration (`spark.conf.get`), not the
# MAGIC   environment.
# MAGIC * The pipeline does not say where a flow's checkpoint is, so the source gets no
# MAGIC   `pipelines.flowCheckpoints`. It needs a runtime with Spark 4.2 or later (Databricks
# MAGIC   Runtime 19): on 4.0 and 4.1 the source needs its query's checkpoint
# MAGIC   (`OptionNeedsSparkError` at the first run). And it cannot tell a full refresh from a
# MAGIC   restart: before a full refresh of `orders_raw`, reset its group to where the table
# MAGIC   should start (`spark-groups reset`, docs/operations.md), or the emptied table only
# MAGIC   gets what arrives after the group's commits. The `delta-group` sink needs nothing:
# MAGIC   its table decides where its flow resumes, and a refresh never writes a record twice.
# MAGIC
# MAGIC None of this was run on Databricks by this project's tests (they run Spark's own
# MAGIC `spark-pipelines`, tests/integration/test_pipelines.py).

# COMMAND ----------

from pyspark import pipelines as dp  # older runtimes: `import dlt as dp`

import spark_groups

spark_groups.register(spark)

conf = spark.conf
KAFKA = {
    "kafka.bootstrap.servers": conf.get("orders.bootstrap_servers"),
    "subscribe": conf.get("orders.topic", "orders"),
    "startingOffsets": "earliest",
    # Credentials from a secret scope, e.g.:
    # "kafka.sasl.jaas.config": dbutils.secrets.get("kafka", "jaas"),
}
#: Where spark_groups keeps its own Delta tables: a cloud location (abfss://, s3://, gs://)
#: where delta-rs commits safely, with its credentials as storage.* options (docs/storage.md).
TABLES = conf.get("orders.tables")
COLUMNS = (
    "cast(key AS string) AS customer",
    "cast(value AS string) AS order_json",
    "topic",
    "partition",
    "offset",
    "timestamp",
)


def orders(group, **options):
    """The orders as the consumer group ``group`` reads them, with its own ledger."""
    return (
        spark.readStream.format("kafka-group")
        .options(**KAFKA)
        .option("group.id", group)
        .option("offsets.table", f"{TABLES}/ledgers/{group}")
        .options(**options)
        .load()
        .selectExpr(*COLUMNS)
    )


@dp.table(comment="Every order as Kafka holds it, read by the consumer group orders-pipeline.")
def orders_raw():
    return orders("orders-pipeline")


dp.create_sink("orders_delta", format="delta-group", options={})


@dp.append_flow(target="orders_delta")
def orders_to_delta():
    return orders("orders-pipeline-delta", **{"sink.table": f"{TABLES}/orders"})
