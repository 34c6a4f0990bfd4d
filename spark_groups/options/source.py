"""Every option of the ``kafka-group`` source: names, defaults, parsing and validation.

Spark hands options over with lower-cased keys, so matching is case-insensitive. Options
that start with ``kafka.`` go to librdkafka unchanged (minus the prefix); everything else
must be one of :data:`SOURCE_OPTIONS`. See ``docs/options.md`` for the user-facing table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, cast, get_args

from spark_groups.errors import OptionError
from spark_groups.kafka.client import validate_config
from spark_groups.kafka.watermarks import END_OFFSET_MODES, EndOffsetsMode
from spark_groups.offsets.ranges import Pipeline
from spark_groups.offsets.starting import StartingOffsets, parse_starting
from spark_groups.options import values
from spark_groups.options.formats import FORMAT_OPTIONS, FormatOptions, parse_formats
from spark_groups.read.native import READ_PATHS, ReadPath
from spark_groups.read.tasks import DEFAULT_RECORDS_PER_TASK
from spark_groups.secrets import is_secret
from spark_groups.storage import flow_checkpoints
from spark_groups.storage.files import check_location
from spark_groups.storage.flow_checkpoints import FLOW_CHECKPOINTS_OPTION
from spark_groups.storage.object_stores import (
    STORAGE_PREFIX,
    check_commit_safety,
    check_task_written,
    storage_options_of,
)
from spark_groups.storage.paths import resolve

#: The classic protocol's client-side assignors.
AssignmentStrategy = Literal["cooperative-sticky", "range", "roundrobin"]
ASSIGNMENT_STRATEGIES: tuple[str, ...] = get_args(AssignmentStrategy)
#: ``classic``: JoinGroup/SyncGroup, the leader assigns. ``consumer``: KIP-848, the broker
#: assigns (``group.remote.assignor``) and every rebalance is incremental.
GroupProtocol = Literal["classic", "consumer"]
GROUP_PROTOCOLS: tuple[str, ...] = get_args(GroupProtocol)
#: Client settings that KIP-848 moves to the broker (librdkafka refuses them there).
_BROKER_SIDE_WITH_CONSUMER_PROTOCOL = {
    "session.timeout.ms": "group.consumer.session.timeout.ms",
    "heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
}
DELIVERY_GUARANTEES = ("at-least-once", "at-most-once")

#: option name (as documented) -> default shown in docs; None means "no default".
SOURCE_OPTIONS: dict[str, str | None] = {
    "subscribe": None,
    "subscribePattern": None,
    "group.id": None,
    "group.instance.id": None,
    "partition.assignment.strategy": "cooperative-sticky",
    "group.protocol": "classic",
    "group.remote.assignor": None,
    "offsets.table": None,
    "rebalances.table": None,
    "offsets.retention": "30d",
    "sink.table": None,
    "checkpointLocation": None,
    FLOW_CHECKPOINTS_OPTION: None,
    "deliveryGuarantee": "at-least-once",
    "startingOffsets": "latest",
    "startingTimestamp": None,
    "startingOffsetsByTimestamp": None,
    "startingOffsetsByTimestampStrategy": "error",
    "maxOffsetsPerTrigger": None,
    "minOffsetsPerTrigger": None,
    "maxTriggerDelay": "15m",
    "includeHeaders": "false",
    "failOnDataLoss": "true",
    "kafkaConsumer.pollTimeoutMs": "120000",
    "endOffsets": "auto",
    "brokerTimeoutMs": "30000",
    "joinTimeoutMs": None,
    "arrowBatchRows": "10000",
    "recordsPerTask": str(DEFAULT_RECORDS_PER_TASK),
    "minPartitions": None,
    "maxRecordsPerPartition": None,
    "readPath": "auto",
    **FORMAT_OPTIONS,
    "deadLetter.table": None,
}

#: Options of Spark's kafka source that this source refuses, with the reason.
UNSUPPORTED_SPARK_OPTIONS: dict[str, str] = {
    "assign": "partitions are assigned by the consumer group; use subscribe or subscribePattern",
    "groupidprefix": "this source joins the group named by group.id",
    "endingoffsets": "streaming queries read until stopped; use Trigger.AvailableNow to stop",
    "endingtimestamp": "streaming queries read until stopped; use Trigger.AvailableNow to stop",
    "endingoffsetsbytimestamp": (
        "streaming queries read until stopped; use Trigger.AvailableNow to stop"
    ),
    "kafka.enable.auto.commit": "offsets are committed by the source when a batch is durable",
    "kafka.auto.offset.reset": "use startingOffsets",
    "kafka.enable.auto.offset.store": "offsets are committed by the source when a batch is durable",
    "kafka.key.deserializer": (
        "a Java consumer setting; set key.format (avro-confluent, json-schema-confluent), "
        "or deserialize the binary key column with DataFrame operations (CAST(key AS "
        "STRING), from_json)"
    ),
    "kafka.value.deserializer": (
        "a Java consumer setting; set value.format (avro-confluent, json-schema-confluent), "
        "or deserialize the binary value column with DataFrame operations (CAST(value AS "
        "STRING), from_json)"
    ),
    "kafka.interceptor.classes": (
        "a Java consumer setting; this source uses librdkafka, which has no interceptors"
    ),
}

TABLE = values.OptionTable(
    "kafka-group",
    SOURCE_OPTIONS,
    {key: "not supported: " + why for key, why in UNSUPPORTED_SPARK_OPTIONS.items()},
    "unknown option (Kafka client settings need the 'kafka.' prefix, e.g. kafka.{key}){hint}",
)


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one ``kafka-group`` source. Picklable; no secrets in repr."""

    group_id: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    group_instance_id: str | None = None
    assignment_strategy: AssignmentStrategy = "cooperative-sticky"
    group_protocol: GroupProtocol = "classic"
    remote_assignor: str | None = None
    ledger_path: str | None = None
    history_path: str | None = None
    sink_path: str | None = None
    checkpoint: str | None = None
    #: A pipeline flow's checkpoints directory (``pipelines.flowCheckpoints``): the
    #: checkpoint is found there when the query starts (:func:`in_flow_checkpoint`).
    flow_checkpoints: str | None = None
    #: The pipeline flow's full refreshes so far (its checkpoint's number; 0: none or no flow).
    flow_refresh: int = 0
    at_most_once: bool = False
    starting_offsets: StartingOffsets = field(default_factory=StartingOffsets)
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    retention_ms: int = 30 * 86_400_000
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    end_offsets_mode: EndOffsetsMode = "auto"
    broker_timeout_ms: int = 30_000
    #: The bound of the wait for the first assignment; None: none (AvailableNow: 120 s).
    join_timeout_ms: int | None = None
    arrow_batch_rows: int = 10_000
    #: Records per Spark task when small ranges are packed together; 0: one task per range.
    records_per_task: int = DEFAULT_RECORDS_PER_TASK
    #: Split ranges so that a batch reads in about this many tasks (``minPartitions``).
    min_partitions: int | None = None
    #: Split ranges so that no task reads more records (``maxRecordsPerPartition``).
    max_records_per_partition: int | None = None
    #: The executor read path: ``auto``, ``python`` or ``native`` (``readPath``).
    read_path: ReadPath = "auto"
    #: How ``key`` and ``value`` are decoded (``key.format``, ``value.format``, the registry,
    #: ``deadLetter.table``).
    formats: FormatOptions = field(default_factory=FormatOptions)
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: ``storage.*`` options without the prefix: delta-rs storage options for the ledger,
    #: the rebalance history and the sink table read by ``sink.table`` (may hold secrets).
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        """``kafka.bootstrap.servers`` as given."""
        return self.kafka["bootstrap.servers"]

    @property
    def pipeline(self) -> Pipeline:
        """Who plans this source's batches and what it shares with the sink (its group,
        ``sink.table``, ``checkpointLocation`` and the ``storage.*`` options that hold no
        secret), recorded in every Spark offset for the delta-group sink
        (``spark_groups.sink.pipeline``)."""
        plain = tuple(sorted((k, v) for k, v in self.storage_options.items() if not is_secret(k)))
        return Pipeline(self.group_id, self.sink_path, self.checkpoint, plain)

    @property
    def tables(self) -> dict[str, str | None]:
        """The Delta tables the driver commits to, by the option that names them (None: not
        given)."""
        return {
            "offsets.table": self.ledger_path,
            "rebalances.table": self.history_path,
            "sink.table": self.sink_path,
        }

    @property
    def subscription(self) -> list[str]:
        """What to pass to ``Consumer.subscribe``: topic names, or one ``^regex``."""
        if self.pattern is not None:
            return [self.pattern if self.pattern.startswith("^") else "^" + self.pattern]
        return list(self.topics)

    def member_config(self) -> dict[str, str]:
        """librdkafka config of the driver's group member (joins the group, never fetches)."""
        config = dict(self.kafka)
        config.update(
            {
                "group.id": self.group_id,
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
            }
        )
        if self.group_protocol == "consumer":
            config["group.protocol"] = "consumer"
            if self.remote_assignor:
                config["group.remote.assignor"] = self.remote_assignor
        else:
            config["partition.assignment.strategy"] = self.assignment_strategy
        if self.group_instance_id:
            config["group.instance.id"] = self.group_instance_id
        return config

    def reader_config(self) -> dict[str, str]:
        """librdkafka config of executor and probe consumers: ``assign()`` only, no group."""
        config = {
            k: v
            for k, v in self.kafka.items()
            if not k.startswith(("group.", "partition.assignment", "session.", "heartbeat."))
            and k != "max.poll.interval.ms"
        }
        # librdkafka wants a group.id for a consumer; it is never used to join (assign only).
        config["group.id"] = f"{self.group_id}.spark-groups-reader"
        config["enable.auto.commit"] = "false"
        config["enable.auto.offset.store"] = "false"
        return config


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the options given to ``spark.readStream.format("kafka-group")``.

    Raises :class:`OptionError` naming the first option at fault.
    """
    given = TABLE.split(options)
    ours, kafka = given.ours, given.kafka
    for name in (
        "group.id",
        "group.instance.id",
        "partition.assignment.strategy",
        "group.protocol",
        "group.remote.assignor",
    ):
        if name in kafka:
            value = kafka.pop(name)
            if name in ours and ours[name] != value:
                raise OptionError(
                    name, f"given twice with different values ({name} and kafka.{name})"
                )
            ours[name] = value

    if not kafka.get("bootstrap.servers", "").strip():
        raise OptionError("kafka.bootstrap.servers", "is required (host:port[,host:port...])")
    group_id = ours.get("group.id", "").strip()
    if not group_id:
        raise OptionError(
            "group.id", "is required: the consumer group this query joins (or kafka.group.id)"
        )
    has_topics, has_pattern = "subscribe" in ours, "subscribePattern" in ours
    if has_topics == has_pattern:
        raise OptionError(
            "subscribe",
            "give exactly one of subscribe or subscribePattern"
            + (" (both were given)" if has_topics else " (neither was given)"),
        )
    strategy = cast(
        AssignmentStrategy, given.choice("partition.assignment.strategy", ASSIGNMENT_STRATEGIES)
    )
    protocol, remote_assignor = _group_protocol(given)
    end_mode = cast(EndOffsetsMode, given.choice("endOffsets", END_OFFSET_MODES))
    guarantee = given.choice("deliveryGuarantee", DELIVERY_GUARANTEES)
    max_records = given.optional_whole_number("maxOffsetsPerTrigger")
    min_records = given.optional_whole_number("minOffsetsPerTrigger")
    if max_records is not None and min_records is not None and min_records > max_records:
        raise OptionError(
            "minOffsetsPerTrigger",
            f"{min_records} is more than maxOffsetsPerTrigger ({max_records}): no batch could "
            "reach it; lower it or raise maxOffsetsPerTrigger",
        )
    storage = storage_options_of(options)
    ledger_path = given.path("offsets.table")
    history = given.path("rebalances.table")
    if history is None and ledger_path is not None:
        history = history_path(ledger_path)
    sink_path = given.path("sink.table")
    checkpoint = given.path("checkpointLocation")
    if checkpoint is not None:
        check_location(checkpoint, storage, option="checkpointLocation")
    flow = given.path(FLOW_CHECKPOINTS_OPTION)
    if flow is not None:
        if checkpoint is not None:
            raise OptionError(
                FLOW_CHECKPOINTS_OPTION,
                "give it or checkpointLocation, not both: in a pipeline the flow's checkpoint "
                "is found in its checkpoints directory when the query starts",
            )
        check_location(flow, storage, option=FLOW_CHECKPOINTS_OPTION)
    formats = parse_formats(
        given, options, None if has_pattern else values.topics(ours["subscribe"])
    )
    if formats.dead_letter_table is not None:
        if not formats.decoded:
            raise OptionError(
                "deadLetter.table", "applies only with key.format or value.format set"
            )
        check_location(formats.dead_letter_table, storage, option="deadLetter.table")
        check_task_written(
            formats.dead_letter_table, storage, "deadLetter.table", prefix=STORAGE_PREFIX
        )
    if ledger_path is not None:
        check_commit_safety(ledger_path, storage, "offsets.table", prefix=STORAGE_PREFIX)
    if history is not None:
        named_by = "rebalances.table" if "rebalances.table" in ours else "offsets.table"
        check_commit_safety(history, storage, named_by, prefix=STORAGE_PREFIX)
    return SourceOptions(
        group_id=group_id,
        topics=values.topics(ours["subscribe"]) if has_topics else (),
        pattern=values.pattern(ours["subscribePattern"]) if has_pattern else None,
        group_instance_id=ours.get("group.instance.id", "").strip() or None,
        assignment_strategy=strategy,
        group_protocol=protocol,
        remote_assignor=remote_assignor,
        ledger_path=ledger_path,
        history_path=history,
        sink_path=sink_path,
        checkpoint=checkpoint,
        flow_checkpoints=flow,
        at_most_once=guarantee == "at-most-once",
        starting_offsets=parse_starting(ours),
        max_offsets_per_trigger=max_records,
        min_offsets_per_trigger=min_records,
        max_trigger_delay_ms=given.duration_ms("maxTriggerDelay"),
        retention_ms=given.duration_ms("offsets.retention"),
        include_headers=given.boolean("includeHeaders"),
        fail_on_data_loss=given.boolean("failOnDataLoss"),
        poll_timeout_ms=given.whole_number("kafkaConsumer.pollTimeoutMs"),
        end_offsets_mode=end_mode,
        broker_timeout_ms=given.whole_number("brokerTimeoutMs"),
        join_timeout_ms=given.optional_whole_number("joinTimeoutMs"),
        arrow_batch_rows=given.whole_number("arrowBatchRows"),
        records_per_task=given.whole_number("recordsPerTask", least=0),
        min_partitions=given.optional_whole_number("minPartitions"),
        max_records_per_partition=given.optional_whole_number("maxRecordsPerPartition"),
        read_path=cast(ReadPath, given.choice("readPath", READ_PATHS)),
        formats=formats,
        kafka=kafka,
        storage_options=storage,
    )


def in_flow_checkpoint(options: SourceOptions) -> SourceOptions:
    """``options`` with the checkpoint its pipeline flow runs in now, found in the flow's
    checkpoints directory (``pipelines.flowCheckpoints``) when the query starts
    (:func:`spark_groups.storage.flow_checkpoints.current`), and how many full refreshes
    the flow has had; ``options`` itself without that option."""
    if options.flow_checkpoints is None:
        return options
    found = flow_checkpoints.current(options.flow_checkpoints, options.storage_options)
    return replace(
        options,
        checkpoint=resolve(found.path, FLOW_CHECKPOINTS_OPTION),
        flow_refresh=found.refresh,
    )


def history_path(ledger_path: str) -> str:
    """The default rebalance-history table (``rebalances.table``) beside a ledger table."""
    return ledger_path.rstrip("/") + "_rebalances"


def _group_protocol(given: values.GivenOptions) -> tuple[GroupProtocol, str | None]:
    """``group.protocol`` and ``group.remote.assignor``, checked against the settings that only
    one of the two protocols takes."""
    ours, kafka = given.ours, given.kafka
    protocol = cast(GroupProtocol, given.choice("group.protocol", GROUP_PROTOCOLS))
    assignor = ours.get("group.remote.assignor", "").strip() or None
    if protocol == "classic":
        if assignor is not None:
            raise OptionError(
                "group.remote.assignor",
                "only applies with group.protocol=consumer (KIP-848); the classic protocol "
                "takes partition.assignment.strategy",
            )
        return protocol, None
    if "partition.assignment.strategy" in ours:
        raise OptionError(
            "partition.assignment.strategy",
            "does not apply with group.protocol=consumer: the broker assigns the partitions; "
            "choose its assignor with group.remote.assignor (uniform or range)",
        )
    for key, broker_key in _BROKER_SIDE_WITH_CONSUMER_PROTOCOL.items():
        if key in kafka:
            raise OptionError(
                f"kafka.{key}",
                f"is the broker's with group.protocol=consumer: remove it and set {broker_key} "
                f"on the brokers, or per group (kafka-configs --entity-type groups, "
                f"{broker_key.removeprefix('group.')})",
            )
    return protocol, assignor


def validate_client_config(options: SourceOptions) -> None:
    """Let librdkafka check every ``kafka.*`` setting now, without connecting anywhere.

    Raises :class:`OptionError` naming the ``kafka.`` key librdkafka rejected.
    """
    validate_config(options.member_config())
