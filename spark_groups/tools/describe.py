"""A consumer group as operators see it: its state and, per partition, where it stands.

Used by ``spark-groups describe`` and ``spark-groups reset``. ``config`` is the librdkafka
client configuration (``bootstrap.servers`` and e.g. SASL settings); error messages never
contain its secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from spark_groups.errors import BrokerUnreachableError, OptionError, TopicNotFoundError
from spark_groups.kafka.client import AdminClient, ConsumerGroupTopicPartitions, KafkaException
from spark_groups.kafka.logs import with_logger
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import TopicPartition, commit_metadata
from spark_groups.secrets import scrub
from spark_groups.tools.lag import lag_at_commit, trend

#: Group states in which no member is active (a reset is allowed).
IDLE_STATES = ("EMPTY", "DEAD")
#: How far back the lag trend looks (its newest points within this window).
TREND_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class PartitionState:
    """What is known about one partition of a group: the offset committed in Kafka (and who
    committed it, from the commit's metadata), the ledger's and the exactly-once sink
    table's positions (None: unknown or not asked), the log end."""

    partition: TopicPartition
    kafka: int | None
    ledger: int | None
    log_end: int
    sink: int | None = None
    committed_by: str = ""
    #: The slope of the lag at commit time over the newest commits, records per minute
    #: (None: unknown; :mod:`spark_groups.tools.lag`).
    lag_trend: float | None = None

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
    def gap(self) -> tuple[int, int] | None:
        """``[sink, committed)`` when the sink's table ends before the group's position: records
        that are not in the table (a partition members hold, or that another consumer of the
        group committed; see docs/sink.md)."""
        committed = self.committed
        if self.sink is None or committed is None or self.sink >= committed:
            return None
        return (self.sink, committed)

    @property
    def disagreement(self) -> str:
        """Why Kafka, the ledger and the sink differ, or ''."""
        notes = []
        if self.ledger is not None and self.kafka != self.ledger:
            if self.kafka is None:
                notes.append("not in Kafka")
            else:
                notes.append("ledger ahead" if self.ledger > self.kafka else "Kafka ahead")
        gap = self.gap
        if gap is not None:
            notes.append(f"sink gap [{gap[0]}, {gap[1]})")
            if self.kafka is not None and self.committed_by:
                notes.append(f"Kafka commit by {self.committed_by}")
        return "; ".join(notes)


@dataclass(frozen=True)
class GroupState:
    """A group's state name (``STABLE``, ``EMPTY``, ...), member count and partitions."""

    state: str
    members: int
    partitions: list[PartitionState]

    @property
    def active(self) -> bool:
        """True while the group has (or may have) active members."""
        return self.members > 0 or self.state not in IDLE_STATES


def admin_client(config: Mapping[str, Any]) -> AdminClient:
    """An AdminClient for ``config`` (librdkafka settings); :class:`OptionError` (secrets
    scrubbed) for a setting librdkafka rejects."""
    try:
        return AdminClient(with_logger(config))
    except (KafkaException, ValueError, TypeError) as exc:
        raise OptionError("-X", f"bad client setting: {scrub(str(exc), config)}") from None


def describe_group(
    config: str | Mapping[str, Any],
    group: str,
    topics: list[str],
    ledger_path: str | None,
    timeout_s: float = 15,
    sink_path: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> GroupState:
    """The group's state and its partitions (of ``topics``, or every topic it committed).

    ``config`` is the bootstrap servers, or librdkafka client settings (with
    ``bootstrap.servers`` and, for a secured cluster, its security settings).
    ``sink_path`` is the group's exactly-once sink table (its positions and gaps are shown).
    ``storage_options`` (delta-rs' names) open the ledger and the sink table.
    """
    if isinstance(config, str):
        config = {"bootstrap.servers": config}
    servers = config.get("bootstrap.servers")
    admin = admin_client(config)
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout_s)
        committed_req = ConsumerGroupTopicPartitions(group)
        committed = admin.list_consumer_group_offsets([committed_req])[group].result(timeout_s)
        metadata = admin.list_topics(timeout=timeout_s)
    except (KafkaException, TimeoutError) as exc:
        problem = scrub(str(exc) or type(exc).__name__, config)
        raise BrokerUnreachableError(
            f"cannot describe group {group!r} on {servers} within {timeout_s:.0f} s ({problem})"
        ) from None
    in_kafka = {
        TopicPartition(p.topic, p.partition): p.offset
        for p in committed.topic_partitions
        if p.offset >= 0
    }
    who = {
        TopicPartition(p.topic, p.partition): commit_metadata.read(p.metadata).text
        for p in committed.topic_partitions
        if p.offset >= 0
    }
    names = topics or sorted({tp.topic for tp in in_kafka})
    missing = [t for t in names if t not in metadata.topics]
    if missing:
        raise TopicNotFoundError(f"topic {missing[0]!r} does not exist on {servers}")
    partitions = [
        TopicPartition(t, p) for t in names for p in sorted(metadata.topics[t].partitions)
    ]
    trends: dict[TopicPartition, float | None] = {}
    in_ledger: dict[TopicPartition, int] = {}
    if ledger_path:
        ledger = OffsetLedger(ledger_path, group, storage_options)
        in_ledger = ledger.latest_positions(partitions)
        recent = ledger.history(partitions, since=datetime.now(UTC) - TREND_WINDOW)
        trends = {tp: trend(points) for tp, points in lag_at_commit(recent).items()}
    with EndOffsetResolver(config) as resolver:
        ends = resolver.end_offsets(partitions)
    in_sink: dict[TopicPartition, int] = {}
    if sink_path:
        from spark_groups.sink.group_commit import committed_positions

        in_sink = committed_positions(sink_path, group, partitions, storage_options)
    rows = [
        PartitionState(
            tp,
            in_kafka.get(tp),
            in_ledger.get(tp),
            ends[tp],
            in_sink.get(tp),
            who.get(tp, ""),
            trends.get(tp),
        )
        for tp in partitions
    ]
    return GroupState(described.state.name, len(described.members or []), rows)
