"""Kafka positions: what a batch reads, where a partition starts, who committed an offset.

* :mod:`~spark_groups.offsets.ranges`: ``TopicPartition``, ``OffsetRange``, ``BatchOffset``
  (the JSON Spark stores), ``Handover`` (importable from here);
* :mod:`~spark_groups.offsets.starting`: the ``starting*`` options, where a partition with no
  committed offset starts;
* :mod:`~spark_groups.offsets.commit_metadata`: the metadata of every OffsetCommit the source
  makes (who committed), and reading it back.
"""

from spark_groups.offsets.ranges import (
    FORMAT_VERSION,
    BatchOffset,
    Handover,
    OffsetRange,
    Pipeline,
    TopicPartition,
    partitions_text,
    positions_text,
    positions_to_json,
)

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
