"""The record-format options of both sources: ``key.format``, ``value.format`` and the registry.

``value.format`` (and ``key.format``) is ``raw`` (the bytes, the default) or one of
:data:`REGISTRY_FORMATS`, Confluent's wire format with its schema in a schema registry
(``schema.registry.url``). Every ``schema.registry.*`` option but the URL goes, without the
prefix, to confluent-kafka's ``SchemaRegistryClient`` (basic and bearer auth, TLS, retries);
those values are kept out of ``repr`` and of every message. docs/formats.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from spark_groups.errors import OptionError
from spark_groups.options import values

#: What ``key.format`` and ``value.format`` take.
Format = Literal["raw", "avro-confluent", "protobuf-confluent", "json-schema-confluent"]
FORMATS: tuple[str, ...] = get_args(Format)
REGISTRY_FORMATS: tuple[str, ...] = FORMATS[1:]
#: How the subject of a topic's schema is named (Confluent's subject name strategies).
SubjectStrategy = Literal["topic", "record", "topic-record"]
SUBJECT_STRATEGIES: tuple[str, ...] = get_args(SubjectStrategy)
#: Kafka Connect's class names of the strategies, accepted as well.
_STRATEGY_CLASSES = {
    "io.confluent.kafka.serializers.subject.topicnamestrategy": "topic",
    "io.confluent.kafka.serializers.subject.recordnamestrategy": "record",
    "io.confluent.kafka.serializers.subject.topicrecordnamestrategy": "topic-record",
}
REGISTRY_PREFIX = values.REGISTRY_PREFIX
#: confluent-kafka's registry client settings that take a number.
_NUMERIC = ("max.retries", "retries.wait.ms", "retries.max.wait.ms", "timeout", "cache.capacity")

#: The format options of a source, with their defaults (None: none), for its option table.
FORMAT_OPTIONS: dict[str, str | None] = {
    **{
        f"{side}.{name}": default
        for side in ("key", "value")
        for name, default in (
            ("format", "raw"),
            ("subject", None),
            ("subject.name.strategy", "topic"),
            ("record.name", None),
            ("schema.version", "latest"),
            ("schema.id", None),
        )
    },
    "includeRawBytes": "false",
    "schemaRegistryTimeoutMs": "60000",
}


@dataclass(frozen=True)
class ColumnFormat:
    """How one column (``key`` or ``value``) is decoded: its format, where its reader schema
    comes from (a subject, by strategy or named, at a version or by id)."""

    column: str
    format: Format = "raw"
    subject: str | None = None
    strategy: SubjectStrategy = "topic"
    #: The record's fully qualified name (the record strategies' subject; for Protobuf, the
    #: reader schema's message, by default its first).
    record_name: str | None = None
    #: The reader schema's version in its subject; None: the latest at the query's start.
    version: int | None = None
    #: The reader schema's id (instead of a subject's version).
    schema_id: int | None = None

    @property
    def decoded(self) -> bool:
        """Whether the column is decoded (any format but ``raw``)."""
        return self.format != "raw"

    def subjects(self, topics: tuple[str, ...]) -> tuple[str, ...]:
        """The subjects whose schema is this column's reader schema, for ``topics``."""
        if self.subject is not None:
            return (self.subject,)
        if self.strategy == "record":
            assert self.record_name is not None
            return (self.record_name,)
        suffix = self.record_name if self.strategy == "topic-record" else self.column
        return tuple(f"{t}-{suffix}" for t in topics)


@dataclass(frozen=True)
class FormatOptions:
    """The format options of one source. Picklable; the registry settings stay out of repr."""

    key: ColumnFormat = field(default_factory=lambda: ColumnFormat("key"))
    value: ColumnFormat = field(default_factory=lambda: ColumnFormat("value"))
    #: Keep the undecoded bytes as ``rawKey`` / ``rawValue`` beside the decoded columns.
    include_raw: bool = False
    #: Bound of the retries of an unreachable registry while the query runs.
    registry_timeout_ms: int = 60_000
    #: Where records that cannot be decoded go (None: the query fails at the first).
    dead_letter_table: str | None = None
    #: The settings of confluent-kafka's ``SchemaRegistryClient`` (``url`` and the rest of
    #: ``schema.registry.*``); may hold secrets.
    registry: Mapping[str, str | int | float] = field(default_factory=dict, repr=False)

    @property
    def decoded(self) -> tuple[ColumnFormat, ...]:
        """The columns that are decoded."""
        return tuple(c for c in (self.key, self.value) if c.decoded)

    @property
    def registry_url(self) -> str:
        """``schema.registry.url`` without credentials in it (for messages)."""
        return redact_url(str(self.registry.get("url", "")))


def parse_formats(
    given: values.GivenOptions, options: Mapping[str, str], topics: tuple[str, ...] | None
) -> FormatOptions:
    """The format options of a source: ``given`` its parsed options, ``options`` all of them
    as given (for ``schema.registry.*``), ``topics`` the subscribed topics (None: a pattern).
    Raises :class:`OptionError` naming the option at fault."""
    registry: dict[str, str | int | float] = {}
    for key, raw in options.items():
        lower = key.lower()
        if lower.startswith(REGISTRY_PREFIX) and len(lower) > len(REGISTRY_PREFIX):
            name = lower[len(REGISTRY_PREFIX) :]
            registry[name] = _registry_value(key, name, str(raw))
    columns = tuple(_column(given, side, topics) for side in ("key", "value"))
    if any(c.decoded for c in columns):
        url = str(registry.get("url", "")).strip()
        if not url:
            raise OptionError(
                "schema.registry.url",
                "is required with a registry format (the schema registry's base URL, e.g. "
                "http://registry:8081)",
            )
        for each in url.split(","):
            if not re.match(r"https?://", each.strip()):
                raise OptionError(
                    "schema.registry.url",
                    f"expected http:// or https:// URLs, got {redact_url(each)!r}",
                )
    elif registry:
        raise OptionError(
            REGISTRY_PREFIX + next(iter(registry)),
            "applies only with key.format or value.format set to a registry format "
            f"({', '.join(REGISTRY_FORMATS)})",
        )
    include_raw = given.boolean("includeRawBytes")
    if include_raw and not any(c.decoded for c in columns):
        raise OptionError("includeRawBytes", "applies only with key.format or value.format set")
    dead_letters = given.path("deadLetter.table")
    return FormatOptions(
        key=columns[0],
        value=columns[1],
        include_raw=include_raw,
        registry_timeout_ms=given.whole_number("schemaRegistryTimeoutMs"),
        dead_letter_table=dead_letters,
        registry=registry,
    )


def _column(given: values.GivenOptions, side: str, topics: tuple[str, ...] | None) -> ColumnFormat:
    fmt = given.choice(f"{side}.format", FORMATS)
    if fmt == "raw":
        for name in ("subject", "record.name", "schema.version", "schema.id"):
            if f"{side}.{name}" in given.ours:
                raise OptionError(f"{side}.{name}", f"applies only with {side}.format set")
        return ColumnFormat(side)
    raw_strategy = given.raw(f"{side}.subject.name.strategy").strip().lower()
    strategy = _STRATEGY_CLASSES.get(raw_strategy) or given.choice(
        f"{side}.subject.name.strategy", SUBJECT_STRATEGIES
    )
    subject = given.ours.get(f"{side}.subject", "").strip() or None
    record_name = given.ours.get(f"{side}.record.name", "").strip() or None
    if subject is None and strategy != "topic" and record_name is None:
        raise OptionError(
            f"{side}.record.name",
            f"is required with {side}.subject.name.strategy={strategy}: the fully qualified "
            "name of the record the producers write (or name the subject with "
            f"{side}.subject)",
        )
    if subject is None and strategy != "record" and topics is None:
        raise OptionError(
            f"{side}.subject",
            "is required with subscribePattern: the topics, and so the subjects, are not known "
            "when the query starts; name the subject whose schema is the reader schema",
        )
    version_raw = given.raw(f"{side}.schema.version").strip().lower()
    version = None if version_raw == "latest" else given.whole_number(f"{side}.schema.version")
    schema_id = given.optional_whole_number(f"{side}.schema.id")
    if schema_id is not None and f"{side}.schema.version" in given.ours:
        raise OptionError(f"{side}.schema.id", f"give it or {side}.schema.version, not both")
    return ColumnFormat(
        column=side,
        format=fmt,  # type: ignore[arg-type]
        subject=subject,
        strategy=strategy,  # type: ignore[arg-type]
        record_name=record_name,
        version=version,
        schema_id=schema_id,
    )


def _registry_value(key: str, name: str, raw: str) -> str | int | float:
    if name in _NUMERIC:
        try:
            return float(raw) if name == "timeout" else int(raw)
        except ValueError:
            raise OptionError(key, f"expected a number, got {raw!r}") from None
    if name == "ssl.ca.location" and raw.strip().lower() == "false":
        return raw  # confluent-kafka takes False; a string here is a path
    return raw


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` credentials replaced by ``***@``."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url)
