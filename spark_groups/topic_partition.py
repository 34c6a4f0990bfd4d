"""``TopicPartition``: one partition of one topic.

It sits below :mod:`spark_groups.errors` and :mod:`spark_groups.offsets` because both name
partitions (errors carry the partitions at fault); import it from ``spark_groups.offsets``.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic (a plain, hashable value; not confluent_kafka's class).

    A named tuple, so hashing and ordering run in C (a member of thousands of partitions sorts
    and looks them up many times a batch)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
