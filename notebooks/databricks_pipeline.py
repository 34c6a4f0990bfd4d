# Databricks notebook source
# MAGIC %md
# MAGIC # spark_groups on Databricks
# MAGIC
# MAGIC A streaming query that is a **member of a Kafka consumer group**, writing **exactly once**
# MAGIC into a Delta table, then the offsets ledger, the group's lag and the coordinator metrics.
# MAGIC
# MAGIC ### Runtime and install
# MAGIC
# MAGIC | Databricks Runtime | Spark | install | notes |
# MAGIC | --- | --- | --- | --- |
# MAGIC | 19 | 4.2 | `%pip install spark-groups` | everything below |
# MAGIC | 18 LTS | 4.1 | `%pip install spark-groups` | one `availableNow` batch, no metrics |
# MAGIC | 17.3 LTS | 4.0 | `%pip install spark-groups` | as 18 LTS |
# MAGIC | serverless, shared (Spark Connect) | | `%pip install spark-groups` | see below |
# MAGIC
# MAGIC Install it without extras: the runtime brings its own pyspark and Delta, and
# MAGIC `spark-groups` does not require pyspark, so pip never replaces the runtime's with one
# MAGIC from PyPI (`[spark]` is for machines without Spark). Older runtimes (Spark 3.x) have no
# MAGIC Python data source API: `register()` fails with `UnsupportedSparkError`.
# MAGIC On 17.3 LTS and 18 LTS the source needs the query's `checkpointLocation` (given below on
# MAGIC every runtime), and `availableNow` runs as one batch of at most `maxOffsetsPerTrigger`
# MAGIC records, committed to Kafka as the query ends (docs/spark-versions.md).
# MAGIC On serverless and shared clusters (Spark Connect) the same cells work; a bad option
# MAGIC fails at `start()` rather than `load()`, and each Connect session calls
# MAGIC `spark_groups.register(spark)` itself (docs/spark-versions.md, "Spark Connect").
# MAGIC
# MAGIC ### Where it keeps its state: a Unity Catalog volume
# MAGIC
# MAGIC Everything lives in a **Unity Catalog volume**, `/Volumes/<catalog>/<schema>/<volume>`,
# MAGIC not under `dbfs:/`: Databricks recommends volumes for files (the DBFS root and DBFS
# MAGIC mounts are deprecated for data, and an admin can turn them off), Unity Catalog governs
# MAGIC who may read and write them, and a volume is a local path on the driver and every
# MAGIC executor. That matters here because spark_groups reads and writes with Python
# MAGIC libraries (delta-rs, pyarrow), which know local paths and object-store URIs but not
# MAGIC `dbfs:`. The cluster needs Unity Catalog access (standard or dedicated access mode) and
# MAGIC `READ VOLUME` and `WRITE VOLUME` on the volume; create it once with
# MAGIC `CREATE VOLUME IF NOT EXISTS <catalog>.<schema>.<volume>`.
# MAGIC
# MAGIC * **The checkpoint** (one per query) is safe on the volume: Spark writes it, spark_groups
# MAGIC   only reads it.
# MAGIC * **The offsets ledger and the sink's table** are Delta tables that spark_groups commits to
# MAGIC   with delta-rs. On a volume's file system a commit cannot be an atomic
# MAGIC   "create if absent", so delta-rs commits there only with `allow_unsafe_rename`, which is
# MAGIC   safe for **one writer**: with the tables on the volume the group has one member, this
# MAGIC   notebook; a second notebook or job with the same `group_id` is refused
# MAGIC   (`OneWriterError`) before it reads anything. To run two or more members, give the
# MAGIC   `tables` widget the cloud location behind the volume (`abfss://...`, `s3://...`,
# MAGIC   `gs://...`), where commits are atomic, and its credentials as `storage.*` options.
# MAGIC * **The dead-letter table** is written by Spark's tasks, several at once, so it needs the
# MAGIC   cloud location too: on the volume the notebook keeps none, and a record that cannot be
# MAGIC   decoded stops the query, losing nothing (docs/storage.md, "One writer").

# COMMAND ----------

dbutils.widgets.text("bootstrap_servers", "broker-1:9092,broker-2:9092")
dbutils.widgets.text("topic", "orders")
dbutils.widgets.text("group_id", "orders-etl")
dbutils.widgets.text("member", "notebook-1")
dbutils.widgets.text("catalog", "main")
dbutils.widgets.text("schema", "default")
dbutils.widgets.text("volume", "pipelines")
dbutils.widgets.text("tables", "")  # empty: on the volume (one member); or a cloud URI

servers = dbutils.widgets.get("bootstrap_servers")
topic = dbutils.widgets.get("topic")
group = dbutils.widgets.get("group_id")
member = dbutils.widgets.get("member")
catalog = dbutils.widgets.get("catalog")
schema = dbutils.widgets.get("schema")
volume = dbutils.widgets.get("volume")

base = f"/Volumes/{catalog}/{schema}/{volume}/{group}"
checkpoint = f"{base}/_checkpoints/{member}"  # one checkpoint per query
tables = dbutils.widgets.get("tables").strip().rstrip("/") or base
offsets_table = f"{tables}/_offsets"
table_path = f"{tables}/orders"

# On the volume: one writer only (delta-rs commits there as check-then-rename). On a cloud
# URI: its credentials, e.g. for ADLS Gen2
# {"storage.azure_storage_account_key": dbutils.secrets.get("pipelines", "adls-key")}, or for
# S3 storage.aws_region and storage.aws_conditional_put=etag (docs/storage.md).
cloud_storage: dict[str, str] = {}
on_volume = tables.startswith("/Volumes/")
storage = {"storage.allow_unsafe_rename": "true"} if on_volume else cloud_storage

# COMMAND ----------

# MAGIC %md
# MAGIC ## Avro records (optional)
# MAGIC
# MAGIC A topic written by a schema-registry serializer (Confluent's wire format): name the
# MAGIC registry, keep its credentials in a secret scope, and `value` becomes a struct of the
# MAGIC subject's latest schema. Records that cannot be decoded go to the dead-letter table
# MAGIC when the tables are on the cloud location; on the volume such a record stops the query
# MAGIC (docs/formats.md).

# COMMAND ----------

dbutils.widgets.text("schema_registry", "")  # empty: plain bytes; or https://registry:8081
registry = dbutils.widgets.get("schema_registry").strip()
formats = {}
if registry:
    formats = {
        "value.format": "avro-confluent",
        "schema.registry.url": registry,
        # "user:password", or a Confluent Cloud API key and secret, from a secret scope
        "schema.registry.basic.auth.user.info": dbutils.secrets.get("kafka", "schema-registry"),
    }
    if not on_volume:  # Spark's tasks write it, several at once: a volume cannot take that
        formats["deadLetter.table"] = f"{tables}/_dead_letters"
value_columns = ["value.*"] if registry else ["cast(value as string) AS json"]

# COMMAND ----------

# MAGIC %md
# MAGIC ## Register and read as a member of the group

# COMMAND ----------

import spark_groups

spark_groups.register(spark)  # kafka-group source, delta-group sink

orders = (
    spark.readStream.format("kafka-group")
    .option("kafka.bootstrap.servers", servers)
    .option("subscribe", topic)
    .option("group.id", group)
    .option("offsets.table", offsets_table)
    .option("sink.table", table_path)  # the exactly-once sink's table, said here only
    .options(**storage)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "100000")  # runtimes 17.3/18: the one availableNow batch
    .option("checkpointLocation", checkpoint)  # the query's; required on 17.3 LTS and 18 LTS
    .options(**formats)
    .load()
    .selectExpr(*value_columns, "topic", "partition", "offset", "timestamp")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Write exactly once into Delta
# MAGIC
# MAGIC `delta-group` commits each batch's rows together with each partition's next offset.
# MAGIC `availableNow` reads what is there and stops (a scheduled run); drop the trigger line
# MAGIC for a continuously running query.

# COMMAND ----------

query = (
    orders.writeStream.format("delta-group")  # table and group: the source's
    .option("member", member)
    .option("checkpointLocation", checkpoint)
    .option("mergeSchema", "true")  # the table takes the fields a newer reader schema adds
    .options(**storage)
    .trigger(availableNow=True)
    .queryName(f"{group}-{member}")
    .start()
)
query.awaitTermination()

# COMMAND ----------

from pyspark.sql import functions as F

from spark_groups.sink.spark import read_table

# spark.read.format("delta") where Delta is present (Databricks); on a cluster without
# Delta's jars, the exact files of the newest version through Spark's Parquet reader.
landed = read_table(spark, table_path)
display(landed.groupBy("partition").agg(F.count("*").alias("n"), F.max("offset").alias("last")))

# COMMAND ----------

# MAGIC %md
# MAGIC ## The offsets ledger: who processed which range, when

# COMMAND ----------

from spark_groups.ledger import OffsetLedger

ledger_storage = {k.removeprefix("storage."): v for k, v in storage.items()}
display(OffsetLedger(offsets_table, group, ledger_storage).history().to_pandas())

# COMMAND ----------

# MAGIC %md
# MAGIC ## Lag: Kafka's committed offsets, the ledger's, the log end
# MAGIC
# MAGIC The same as `spark-groups describe <group> -b <servers> --offsets-table <path>`.

# COMMAND ----------

from spark_groups.tools.describe import describe_group

described = describe_group(servers, group, [topic], offsets_table)
print("group state:", described.state, "members:", described.members)
display(
    [
        {
            "partition": str(p.partition),
            "kafka": p.kafka,
            "ledger": p.ledger,
            "log_end": p.log_end,
            "lag": p.lag,
            "note": p.disagreement,
        }
        for p in described.partitions
    ]
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Coordinator metrics (docs/metrics.md)
# MAGIC
# MAGIC Assigned partitions, rebalances, barrier waits, failed commits, lag, per query. Attach
# MAGIC the listener before starting queries to push them to your monitoring system.

# COMMAND ----------

from spark_groups.metrics import coordinator_metrics

# Runtime 19 and later (Spark 4.2+); on 17.3 LTS and 18 LTS Spark does not ask a Python
# source for its progress, and this prints nothing.
for metrics in coordinator_metrics(query.lastProgress):
    print(metrics)
