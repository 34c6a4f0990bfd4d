"""For plain consumer services in a group with spark_groups members: start where the table ends.

A Spark member with the ``delta-group`` sink commits a batch to its Delta table first and to
Kafka right after. A member killed between the two (SIGKILL, an OOM, a lost node) leaves
Kafka's committed offset one batch behind the table, and a plain consumer that takes the
partition over from Kafka's offset processes that batch again: its records end up in the
table *and* in the service's output. The batch may even still be landing in the table while
the service starts (the killed member's sink commit was in flight).

:class:`SinkTableHandover` closes that window for a confluent-kafka consumer. Give its
:meth:`~SinkTableHandover.on_assign` to ``subscribe`` (or call it from your own
``on_assign``). For the newly assigned partitions it

1. *claims* them in the sink's table (``spark_groups.sink.claim_tokens``): from this commit on,
   no batch of the previous Spark owner can land them any more, so the table's positions
   read in the same commit are final;
2. commits those positions to Kafka where the table is ahead of the group's committed
   offset, before the consumer fetches: the consumer then starts exactly where the table
   ends, and lag tools see the right offset.

::

    from confluent_kafka import Consumer
    from spark_groups.handover import SinkTableHandover

    handover = SinkTableHandover("/data/tables/orders", group_id="orders-etl")
    consumer = Consumer({"group.id": "orders-etl", "enable.auto.commit": False, ...})
    consumer.subscribe(["orders"], on_assign=handover.on_assign)

It needs ``deltalake`` (a dependency of spark_groups) and read/write access to the table's
``_delta_log`` (``storage_options`` as delta-rs takes them, for object stores). Without a
table yet there is nothing to claim and the consumer starts from Kafka's offsets as usual.
The guarantees per kind of next owner: docs/guarantees.md.
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
        """confluent-kafka's ``on_assign``: steps 1 and 2 of the module doc for
        ``partitions``. Raises :class:`~spark_groups.errors.SinkClaimError` when the table
        cannot be claimed in time (the consumer's poll raises it: better than starting from
        an offset that may repeat the table's records)."""
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
