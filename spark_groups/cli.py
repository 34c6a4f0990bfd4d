"""The ``spark-groups`` command: look at a consumer group the way operators do.

    spark-groups describe GROUP --bootstrap-servers HOST:PORT [--offsets-table PATH] [--topic T]

Shows the group's state and, per partition, the offset committed in Kafka, the last
``until`` in the ledger, the log end and the lag, and flags where Kafka and the ledger
disagree. It uses the public pieces of the library only.
"""

from __future__ import annotations

from dataclasses import dataclass

import click
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.table import Table

from spark_groups.errors import BrokerUnreachableError, SparkGroupsError
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.watermarks import EndOffsetResolver


@dataclass(frozen=True)
class PartitionState:
    """What is known about one partition of a group."""

    partition: TopicPartition
    kafka: int | None
    ledger: int | None
    log_end: int

    @property
    def committed(self) -> int | None:
        """The offset the group resumes from: the furthest of Kafka and the ledger."""
        known = [o for o in (self.kafka, self.ledger) if o is not None]
        return max(known) if known else None

    @property
    def lag(self) -> int | None:
        """Records not yet committed."""
        return None if self.committed is None else max(0, self.log_end - self.committed)

    @property
    def disagreement(self) -> str:
        """Why Kafka and the ledger differ, or ''."""
        if self.ledger is None or self.kafka == self.ledger:
            return ""
        if self.kafka is None:
            return "not in Kafka"
        return "ledger ahead" if self.ledger > self.kafka else "Kafka ahead"


def describe_group(
    servers: str, group: str, topics: list[str], ledger_path: str | None, timeout_s: float = 15
) -> tuple[str, list[PartitionState]]:
    """The group's state and its partitions (of ``topics``, or every topic it committed)."""
    admin = AdminClient({"bootstrap.servers": servers})
    try:
        state = admin.describe_consumer_groups([group])[group].result(timeout_s).state.name
        committed_req = ConsumerGroupTopicPartitions(group)
        committed = admin.list_consumer_group_offsets([committed_req])[group].result(timeout_s)
        metadata = admin.list_topics(timeout=timeout_s)
    except (KafkaException, TimeoutError) as exc:
        raise BrokerUnreachableError(
            f"cannot describe group {group!r} on {servers} within {timeout_s:.0f} s "
            f"({exc or type(exc).__name__})"
        ) from None
    in_kafka = {
        TopicPartition(p.topic, p.partition): p.offset
        for p in committed.topic_partitions
        if p.offset >= 0
    }
    names = topics or sorted({tp.topic for tp in in_kafka})
    missing = [t for t in names if t not in metadata.topics]
    if missing:
        raise SparkGroupsError(f"topic {missing[0]!r} does not exist on {servers}")
    partitions = [
        TopicPartition(t, p) for t in names for p in sorted(metadata.topics[t].partitions)
    ]
    in_ledger = OffsetLedger(ledger_path, group).latest_positions(partitions) if ledger_path else {}
    with EndOffsetResolver({"bootstrap.servers": servers}) as resolver:
        ends = resolver.end_offsets(partitions)
    return state, [
        PartitionState(tp, in_kafka.get(tp), in_ledger.get(tp), ends[tp]) for tp in partitions
    ]


@click.group()
def main() -> None:
    """Inspect consumer groups read by spark_groups queries."""


@main.command()
@click.argument("group")
@click.option("--bootstrap-servers", "-b", required=True, help="host:port of the cluster")
@click.option("--offsets-table", help="the group's Delta ledger (offsets.table)")
@click.option("--topic", "topics", multiple=True, help="only these topics (default: all committed)")
def describe(
    group: str, bootstrap_servers: str, offsets_table: str | None, topics: tuple[str, ...]
) -> None:
    """State of GROUP, and per partition: Kafka offset, ledger offset, log end, lag."""
    try:
        state, rows = describe_group(bootstrap_servers, group, list(topics), offsets_table)
    except SparkGroupsError as exc:
        raise click.ClickException(str(exc)) from None
    table = Table(title=f"group {group} ({state})")
    for column in ("topic", "partition", "kafka", "ledger", "log end", "lag", "note"):
        table.add_column(column, justify="left" if column in ("topic", "note") else "right")

    def show(value: int | None) -> str:
        return "-" if value is None else str(value)

    for row in rows:
        table.add_row(
            row.partition.topic, str(row.partition.partition), show(row.kafka),
            show(row.ledger), str(row.log_end), show(row.lag), row.disagreement,
        )  # fmt: skip
    Console(width=120).print(table)
