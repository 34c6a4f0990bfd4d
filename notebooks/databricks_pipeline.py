# Databricks notebook source
# MAGIC %md
# MAGIC # spark_groups on Databricks
# MAGIC
# MAGIC A streaming query that is a **member of a Kafka consumer group**, writing **exactly once**
# MAGIC into a Delta table, then the offsets ledger, the group's lag and the coordinator metrics.
# MAGIC Run it in two notebooks (or as two jobs) with the same `group.id`: the group splits the
# MAGIC partitions between them. Install the library on the cluster first
# MAGIC (`%pip install spark-groups`, or a wheel as a cluster library).

# COMMAND ----------

dbutils.widgets.text("bootstrap_servers", "broker-1:9092,broker-2:9092")
dbutils.widgets.text("topic", "orders")
dbutils.widgets.text("group_id", "orders-etl")
dbutils.widgets.text("base", "dbfs:/pipelines/orders-etl")
dbutils.widgets.text("member", "notebook-1")

servers = dbutils.widgets.get("bootstrap_servers")
topic = dbutils.widgets.get("topic")
group = dbutils.widgets.get("group_id")
base = dbutils.widgets.get("base")
member = dbutils.widgets.get("member")

# delta-rs (the ledger and the sink) takes local paths or object-store URIs, not dbfs:/.
local_base = base.replace("dbfs:/", "/dbfs/", 1)
offsets_table = f"{local_base}/_offsets/{group}"
table_path = f"{local_base}/tables/orders"
checkpoint = f"{base}/_checkpoints/{group}-{member}"  # one checkpoint per query

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
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "100000")
    .load()
    .selectExpr("cast(value as string) AS json", "topic", "partition", "offset", "timestamp")
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
    orders.writeStream.format("delta-group")
    .option("group.id", group)
    .option("member", member)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .queryName(f"{group}-{member}")
    .start(table_path)
)
query.awaitTermination()

# COMMAND ----------

from pyspark.sql import functions as F

from spark_groups.sink.spark import read_table

# spark.read.format("delta") where Delta is present (Databricks); on a cluster without
# Delta's jars, the exact files of the newest version through Spark's Parquet reader.
landed = read_table(spark, table_path)
display(
    landed.groupBy("partition").agg(F.count("*").alias("n"), F.max("offset").alias("last"))
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The offsets ledger: who processed which range, when

# COMMAND ----------

from spark_groups.ledger import OffsetLedger

display(OffsetLedger(offsets_table, group).history().to_pandas())

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

for metrics in coordinator_metrics(query.lastProgress):
    print(metrics)
