"""Kafka positions: what a batch reads, where a partition starts, who committed an offset.

* :mod:`~spark_groups.offsets.ranges`: ``OffsetRange``, ``BatchOffset`` (the JSON Spark
  stores), ``Handover`` (importable from here, as is ``TopicPartition``, which
  :mod:`spark_groups.topic_partition` holds because errors name partitions too);
* :mod:`~spark_groups.offsets.starting`: the ``starting*`` options, where a partition with no
  committed offset starts;
* :mod:`~spark_groups.offsets.commit_metadata`: the metadata of every OffsetCommit the source
  makes (who committed), and reading it back;
* :mod:`~spark_groups.offsets.offset_sets`: ``OffsetSet`` / ``PartitionOffsets``, a share
  batch's offsets per partition kept as ranges.
"""

from spark_groups.offsets.ranges import (
    FORMAT_VERSION,
    BatchOffset,
    Handover,
    OffsetRange,
    Pipeline,
    partitions_text,
    positions_text,
    positions_to_json,
)
from spark_groups.topic_partition import TopicPartition

__all__ = [
    "FORMAT_VERSION",
    "BatchOffset",
    "Handover",
    "OffsetRange",
    "Pipeline",
    "TopicPartition",
    "partitions_text",
    "positions_text",
    "positions_to_json",
]
