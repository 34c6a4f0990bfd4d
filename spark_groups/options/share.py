"""The options of the ``kafka-share`` source (experimental), checked where the query is defined.

``sink.table`` is required: a record may be ACCEPTed only once it is in that ``delta-group``
table (``spark_groups.share.acks``), so the reading tasks follow its commits. ``tasks`` is the
number of share consumers reading each batch. ``deadLetter.table`` (a Delta table, made when
missing) takes the records the group gives out for the last time
(``share.delivery.count.limit``): they are written there and REJECTed, not read into the
batch (``spark_groups.share.dead_letters``); with ``value.format`` (or ``key.format``) also
those that cannot be decoded. docs/share-groups.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_groups.errors import OptionError
from spark_groups.offsets import Pipeline
from spark_groups.options import values
from spark_groups.options.formats import FORMAT_OPTIONS, FormatOptions, parse_formats
from spark_groups.secrets import is_secret
from spark_groups.storage.files import check_location
from spark_groups.storage.object_stores import (
    STORAGE_PREFIX,
    check_commit_safety,
    check_task_written,
    refuse_one_writer,
    storage_options_of,
)

#: Options of the source (besides ``kafka.*`` and ``storage.*``), with their defaults.
SHARE_OPTIONS: dict[str, str | None] = {
    "group.id": None,
    "subscribe": None,
    "sink.table": None,
    "checkpointLocation": None,
    "tasks": "2",
    "maxRecordsPerTask": "10000",
    "pollBudgetMs": "1000",
    "lockMarginMs": "5000",
    "includeHeaders": "false",
    "deadLetter.table": None,
    **FORMAT_OPTIONS,
}
#: librdkafka settings the source sets itself.
REFUSED_KAFKA = {
    "share.acknowledgement.mode": "the source acknowledges explicitly, once the table has them",
    "enable.auto.commit": "a share consumer commits acknowledgements, not offsets",
}
TABLE = values.OptionTable(
    "kafka-share",
    SHARE_OPTIONS,
    {values.KAFKA_PREFIX + key: f"set by the source: {why}" for key, why in REFUSED_KAFKA.items()},
    "unknown option of the kafka-share source (Kafka client settings need the 'kafka.' "
    "prefix: kafka.{key})",
)


@dataclass(frozen=True)
class ShareOptions:
    """The validated options of one ``kafka-share`` source. Picklable; no secrets in repr."""

    group_id: str
    topics: tuple[str, ...]
    sink_path: str
    checkpoint: str | None = None
    tasks: int = 2
    max_records_per_task: int = 10_000
    poll_budget_ms: int = 1000
    lock_margin_ms: int = 5000
    include_headers: bool = False
    #: ``key.format``, ``value.format``, the registry (docs/formats.md) and
    #: ``deadLetter.table``: where records on their last delivery go (None: they are read into
    #: the batch) and those that cannot be decoded (None: the query fails at the first).
    formats: FormatOptions = field(default_factory=FormatOptions)
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def pipeline(self) -> Pipeline:
        """The group, table, checkpoint and plain ``storage.*`` options every batch's offset
        carries for the sink (said once, as for ``kafka-group``)."""
        plain = tuple(sorted((k, v) for k, v in self.storage_options.items() if not is_secret(k)))
        return Pipeline(self.group_id, self.sink_path, self.checkpoint, plain)

    def consumer_config(self) -> dict[str, str]:
        """The share consumers' librdkafka configuration (``max.poll.records``: the
        broker's hint, ``maxRecordsPerTask`` unless given as ``kafka.max.poll.records``)."""
        return {
            "max.poll.records": str(self.max_records_per_task),
            **self.kafka,
            "group.id": self.group_id,
        }


def parse_share_options(options: Mapping[str, str]) -> ShareOptions:
    """Validate the options given to ``spark.readStream.format("kafka-share")``; an
    :class:`~spark_groups.errors.OptionError` names the first one at fault."""
    given = TABLE.split(options)
    ours, kafka = given.ours, given.kafka
    if "group.id" in kafka:  # group.id wins
        ours.setdefault("group.id", kafka.pop("group.id"))
    if not kafka.get("bootstrap.servers", "").strip():
        raise OptionError("kafka.bootstrap.servers", "is required (host:port[,host:port...])")
    group_id = ours.get("group.id", "").strip()
    if not group_id:
        raise OptionError("group.id", "is required: the share group this query reads")
    if "subscribe" not in ours:
        raise OptionError("subscribe", "is required: the topics the share group reads")
    sink_path = given.path("sink.table")
    if sink_path is None:
        raise OptionError(
            "sink.table",
            "is required: the delta-group table the query writes. A share group's record may "
            "be acknowledged only once it is in that table, so the reading tasks follow its "
            "commits",
        )
    storage = storage_options_of(options)
    check_commit_safety(sink_path, storage, "sink.table", prefix=STORAGE_PREFIX)
    refuse_one_writer(
        sink_path,
        storage,
        "sink.table",
        "a share group's queries cannot be held to one: nothing here can list a share "
        "group's members (confluent-kafka's AdminClient has no DescribeShareGroups)",
        prefix=STORAGE_PREFIX,
    )
    checkpoint = given.path("checkpointLocation")
    if checkpoint is not None:
        check_location(checkpoint, storage, option="checkpointLocation")
    dead_letters = given.path("deadLetter.table")
    if dead_letters is not None:
        check_location(dead_letters, storage, option="deadLetter.table")
        check_task_written(dead_letters, storage, "deadLetter.table", prefix=STORAGE_PREFIX)
        if dead_letters.rstrip("/") == sink_path.rstrip("/"):
            raise OptionError(
                "deadLetter.table", "is the sink's table: give the dead letters a table of "
                "their own (they have the dead-letter columns, not the query's)",
            )  # fmt: skip
    topics = values.topics(ours["subscribe"])
    return ShareOptions(
        group_id=group_id,
        topics=topics,
        sink_path=sink_path,
        checkpoint=checkpoint,
        tasks=given.whole_number("tasks"),
        max_records_per_task=given.whole_number("maxRecordsPerTask"),
        poll_budget_ms=given.whole_number("pollBudgetMs"),
        lock_margin_ms=given.whole_number("lockMarginMs"),
        include_headers=given.boolean("includeHeaders"),
        formats=parse_formats(given, options, topics),
        kafka=kafka,
        storage_options=storage,
    )
