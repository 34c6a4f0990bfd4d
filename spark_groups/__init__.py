"""spark_groups: a PySpark Structured Streaming source that is a real Kafka consumer-group member.

import spark_groups
spark_groups.register(spark)
df = (spark.readStream.format("kafka-group")
      .option("kafka.bootstrap.servers", servers)
      .option("subscribe", "orders")
      .option("group.id", "orders-etl")
      .option("offsets.table", "/data/_offsets/orders-etl")
      .load())
query = (df.writeStream.format("delta-group")          # exactly-once into Delta
         .option("group.id", "orders-etl")
         .option("checkpointLocation", "/data/_checkpoints/orders-etl")
         .start("/data/tables/orders"))
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from spark_groups.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnreachableError,
    CommitError,
    DataLossError,
    GroupActiveError,
    GroupMembershipError,
    LedgerError,
    LocalTableOnClusterError,
    MaintenanceError,
    MaintenanceRunningError,
    NoOffsetForTimestampError,
    OptionError,
    OptionNeedsSparkError,
    SinkClaimError,
    SinkError,
    SinkFeatureError,
    SinkGapError,
    SinkTablePropertyError,
    SparkGroupsError,
    StaleGenerationError,
    TopicNotFoundError,
    UnsupportedSparkError,
)
from spark_groups.spark import FORMAT, SINK_FORMAT

if TYPE_CHECKING:
    from spark_groups.storage.flow_checkpoints import flow_checkpoints

__version__ = "0.1.0"

__all__ = [
    "FORMAT",
    "SINK_FORMAT",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerUnreachableError",
    "CommitError",
    "DataLossError",
    "GroupActiveError",
    "GroupMembershipError",
    "LedgerError",
    "LocalTableOnClusterError",
    "MaintenanceError",
    "MaintenanceRunningError",
    "NoOffsetForTimestampError",
    "OptionError",
    "OptionNeedsSparkError",
    "SinkClaimError",
    "SinkError",
    "SinkFeatureError",
    "SinkGapError",
    "SinkTablePropertyError",
    "SparkGroupsError",
    "StaleGenerationError",
    "TopicNotFoundError",
    "UnsupportedSparkError",
    "flow_checkpoints",
    "register",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())


def register(spark: Any) -> None:
    """Register the ``kafka-group`` source, the ``delta-group`` sink and the experimental
    ``kafka-share`` source with a SparkSession."""
    from spark_groups.sink.spark import DeltaGroupDataSource
    from spark_groups.sources.kafka_group import KafkaGroupDataSource
    from spark_groups.sources.kafka_share import KafkaShareDataSource

    spark.dataSource.register(KafkaGroupDataSource)
    spark.dataSource.register(DeltaGroupDataSource)
    spark.dataSource.register(KafkaShareDataSource)


def __getattr__(name: str) -> Any:
    """``flow_checkpoints`` (a pipeline flow's checkpoints directory, for a definitions file),
    imported on first use: ``import spark_groups`` stays light (no pyarrow)."""
    if name == "flow_checkpoints":
        from spark_groups.storage.flow_checkpoints import flow_checkpoints

        return flow_checkpoints
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
