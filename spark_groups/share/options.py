"""The options of the ``kafka-share`` source (experimental), checked where the query is
defined.

::

    spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", "broker:9092")
        .option("group.id", "orders-queue")       # the share group
        .option("subscribe", "orders")
        .option("sink.table", "/lake/orders")     # the delta-group table (required)
        .option("tasks", "8")                     # share consumers reading each batch
        .option("deadLetter.table", "/lake/orders_dead")  # records on their last delivery
        .load()

``sink.table`` is required: a record may be ACCEPTed only once it is in that table
(``spark_groups.share.acks``), so the reading tasks follow its commits. ``deadLetter.table``
(a Delta table, made when missing) takes the records the group gives out for the last time
(``share.delivery.count.limit``): they are written there and REJECTed, not read into the
batch (``spark_groups.share.dead_letters``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_groups import option_values as values
from spark_groups.errors import OptionError
from spark_groups.offsets import Pipeline
from spark_groups.secrets import is_secret
from spark_groups.storage.files import check_location
from spark_groups.storage.object_stores import STORAGE_PREFIX, storage_options_of

KAFKA_PREFIX = "kafka."
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
}
#: librdkafka settings the source sets itself.
REFUSED_KAFKA = {
    "share.acknowledgement.mode": "the source acknowledges explicitly, once the table has them",
    "enable.auto.commit": "a share consumer commits acknowledgements, not offsets",
}
_LOWER = {name.lower(): name for name in SHARE_OPTIONS}


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
    #: Where records on their last delivery go (None: they are read into the batch).
    dead_letter_path: str | None = None
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
    ours: dict[str, str] = {}
    kafka: dict[str, str] = {}
    for key, value in options.items():
        lower = key.lower()
        if lower.startswith(KAFKA_PREFIX):
            name = lower[len(KAFKA_PREFIX) :]
            if name in REFUSED_KAFKA:
                raise OptionError(key, f"set by the source: {REFUSED_KAFKA[name]}")
            if name == "group.id":
                ours.setdefault("group.id", str(value))
                continue
            kafka[name] = str(value)
        elif lower.startswith(STORAGE_PREFIX) and len(lower) > len(STORAGE_PREFIX):
            continue
        elif lower in _LOWER:
            ours[_LOWER[lower]] = str(value)
        elif lower == "path":
            raise OptionError("path", "the kafka-share source takes no path; use subscribe")
        else:
            raise OptionError(key, "unknown option of the kafka-share source (Kafka client "
                              f"settings need the 'kafka.' prefix: kafka.{key})")  # fmt: skip
    if not kafka.get("bootstrap.servers", "").strip():
        raise OptionError("kafka.bootstrap.servers", "is required (host:port[,host:port...])")
    group_id = ours.get("group.id", "").strip()
    if not group_id:
        raise OptionError("group.id", "is required: the share group this query reads")
    if "subscribe" not in ours:
        raise OptionError("subscribe", "is required: the topics the share group reads")
    sink_path = values.path("sink.table", ours)
    if sink_path is None:
        raise OptionError(
            "sink.table",
            "is required: the delta-group table the query writes. A share group's record may "
            "be acknowledged only once it is in that table, so the reading tasks follow its "
            "commits",
        )
    storage = storage_options_of(options)
    checkpoint = values.path("checkpointLocation", ours)
    if checkpoint is not None:
        check_location(checkpoint, storage, option="checkpointLocation")
    dead_letters = values.path("deadLetter.table", ours)
    if dead_letters is not None:
        check_location(dead_letters, storage, option="deadLetter.table")
        if dead_letters.rstrip("/") == sink_path.rstrip("/"):
            raise OptionError(
                "deadLetter.table", "is the sink's table: give the dead letters a table of "
                "their own (they have the dead-letter columns, not the query's)",
            )  # fmt: skip

    def number(name: str) -> int:
        return values.positive_int(name, ours.get(name, SHARE_OPTIONS[name] or ""))

    return ShareOptions(
        group_id=group_id,
        topics=values.topics(ours["subscribe"]),
        sink_path=sink_path,
        checkpoint=checkpoint,
        tasks=number("tasks"),
        max_records_per_task=number("maxRecordsPerTask"),
        poll_budget_ms=number("pollBudgetMs"),
        lock_margin_ms=number("lockMarginMs"),
        include_headers=values.boolean("includeHeaders", ours.get("includeHeaders", "false")),
        dead_letter_path=dead_letters,
        kafka=kafka,
        storage_options=storage,
    )
