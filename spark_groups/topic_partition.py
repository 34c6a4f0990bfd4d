"""``TopicPartition``: one partition of one topic.

It sits below :mod:`spark_groups.errors` and :mod:`spark_groups.offsets` because both name
partitions (errors carry the partitions at fault); import it from ``spark_groups.offsets``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One partition of one topic (a plain, hashable value; not confluent_kafka's class)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
