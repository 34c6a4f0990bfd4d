"""For plain consumer services in a group with spark_groups members: start where the table ends.

A member killed between its sink's Delta commit and its Kafka commit leaves Kafka one batch
behind the ``delta-group`` table; a plain consumer that took the partition over from Kafka's
offset would process that batch again. :meth:`SinkTableHandover.on_assign` (give it to
``subscribe``, or call it from your own ``on_assign``) claims the newly assigned partitions in
the table, so no batch of the previous owner can land them any more, and commits the table's
positions to Kafka where the table is ahead, before the consumer fetches. Without a table yet
the consumer starts from Kafka's offsets. It needs read/write access to the table's
``_delta_log`` (``storage_options`` as delta-rs takes them). Example and guarantees:
docs/guarantees.md, "Hard kills and the next owner".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spark_groups.kafka.client import KafkaTopicPartition
from spark_groups.offsets import TopicPartition, positions_text
from spark_groups.sink import claim_tokens

log = logging.getLogger(__name__)

__all__ = ["SinkTableHandover"]


class SinkTableHandover:
    """Claims a plain consumer's new partitions in the ``delta-group`` table at ``table`` of
    consumer group ``group_id`` and starts them where the table ends (see the module doc).

    ``member`` names the service in the table's commit info; ``timeout_s`` bounds each claim
    (against concurrent commits of the Spark members); ``kafka_timeout_s`` bounds reading and
    committing the group's offsets.
    """

    def __init__(
        self,
        table: str,
        group_id: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        member: str = "plain consumer",
        timeout_s: float = claim_tokens.DEFAULT_TIMEOUT_S,
        kafka_timeout_s: float = 30.0,
    ) -> None:
        """Describe the table; nothing is read until partitions are assigned."""
        self.table = table
        self.group_id = group_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.member = member
        self.timeout_s = timeout_s
        self.kafka_timeout_s = kafka_timeout_s
        #: The claim token of every partition this consumer claimed.
        self.tokens: dict[TopicPartition, int] = {}

    def __repr__(self) -> str:
        return f"SinkTableHandover(table={self.table!r}, group_id={self.group_id!r})"

    def on_assign(self, consumer: Any, partitions: Sequence[Any]) -> None:
        """confluent-kafka's ``on_assign``: claim ``partitions`` in the table and commit its
        positions where it is ahead (the module doc). Raises
        :class:`~spark_groups.errors.SinkClaimError` when the table cannot be claimed in time (the
        consumer's poll raises it: better than starting from an offset that may repeat the table's
        records)."""
        wanted = [TopicPartition(p.topic, p.partition) for p in partitions]
        if not wanted:
            return
        token = claim_tokens.new_token()
        claimed = claim_tokens.claim(
            self.table,
            self.group_id,
            wanted,
            token,
            storage_options=self.storage_options,
            member=self.member,
            timeout_s=self.timeout_s,
        )
        if claimed is None:
            return
        for tp in wanted:
            self.tokens[tp] = token
        if not claimed.positions:
            return
        asked = [KafkaTopicPartition(tp.topic, tp.partition) for tp in claimed.positions]
        committed = {
            TopicPartition(p.topic, p.partition): p.offset
            for p in consumer.committed(asked, timeout=self.kafka_timeout_s)
        }
        ahead = {tp: v for tp, v in claimed.positions.items() if v > max(committed.get(tp, -1), -1)}
        if not ahead:
            return
        consumer.commit(
            offsets=[KafkaTopicPartition(tp.topic, tp.partition, v) for tp, v in ahead.items()],
            asynchronous=False,
        )
        log.info(
            "group %s: the sink table %s is ahead of Kafka's commits; starting there: %s",
            self.group_id,
            self.table,
            positions_text(ahead),
        )
