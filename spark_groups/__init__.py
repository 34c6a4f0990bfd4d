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

The public surface, besides :func:`register`, the format names and the errors exported here
(and :func:`flow_checkpoints`, a pipeline flow's checkpoints directory):

* :mod:`~spark_groups.handover`: ``SinkTableHandover``, a plain confluent-kafka service's
  ``on_assign`` that claims its partitions in the ``delta-group`` table;
* :mod:`~spark_groups.metrics`: the coordinator metrics in the query progress, read back
  (``coordinator_metrics``, ``log_end_offsets``);
* :mod:`~spark_groups.deadletter`: opt-in dead letters;
* :mod:`~spark_groups.embedded`: ``EmbeddedBroker``, the demo's and the notebooks' broker;
* :mod:`~spark_groups.errors`: the exception hierarchy, one root: ``SparkGroupsError``.

Below it (docs/architecture.md, "Packages and modules"): :mod:`~spark_groups.topic_partition`
(``TopicPartition``), :mod:`~spark_groups.secrets` (which settings are secrets),
:mod:`~spark_groups.crash_points` (the named points of a batch's life, for tests), and the
packages :mod:`~spark_groups.sources` (the sources' Spark adapters),
:mod:`~spark_groups.options` (every option), :mod:`~spark_groups.offsets` (Kafka positions),
:mod:`~spark_groups.storage` (where tables and checkpoints live), :mod:`~spark_groups.kafka`
(the one place that talks to librdkafka), :mod:`~spark_groups.group` (the driver),
:mod:`~spark_groups.read` (the executor side), :mod:`~spark_groups.formats` (keys and values
in a schema registry's formats, decoded), :mod:`~spark_groups.ledger` (the offsets
table), :mod:`~spark_groups.sink` (the ``delta-group`` sink), :mod:`~spark_groups.share` (the
``kafka-share`` source's parts), :mod:`~spark_groups.spark` (what the adapters share) and
:mod:`~spark_groups.tools` (the ``spark-groups`` command and the test processes).
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
    ``kafka-share`` source with a SparkSession, which then also redacts the schema
    registry's credentials in its plans (:mod:`spark_groups.spark.redaction`)."""
    from spark_groups.sink.spark import DeltaGroupDataSource
    from spark_groups.sources.kafka_group import KafkaGroupDataSource
    from spark_groups.sources.kafka_share import KafkaShareDataSource
    from spark_groups.spark.redaction import redact_registry_credentials

    redact_registry_credentials(spark)

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
