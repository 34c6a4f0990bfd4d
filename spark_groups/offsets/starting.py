"""Where a partition with no committed offset starts: the ``starting*`` options.

Spark's kafka source's options and precedence (the first one given wins):
``startingTimestamp`` (one timestamp for every partition), ``startingOffsetsByTimestamp``
(JSON, a timestamp per partition), ``startingOffsets`` (``earliest``, ``latest``, the default,
or JSON offsets). A timestamp means the first record at or after it; where there is none,
``startingOffsetsByTimestampStrategy`` fails the query (``error``) or starts at the log end
(``latest``). Partitions a JSON option does not list start at ``latest``, those that appear
while the query runs at ``earliest``. A committed offset always wins over all of this
(``spark_groups.group.resume``). docs/options.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from spark_groups.errors import OptionError
from spark_groups.offsets import TopicPartition

#: The log start and the log end as Kafka spells them: the ListOffsets "timestamps" that ask
#: for them (spark_groups.kafka.list_offsets), and so Spark's kafka source's JSON offsets.
EARLIEST = -2
LATEST = -1

#: What ``startingOffsetsByTimestampStrategy`` does where no record is that late.
TimestampStrategy = Literal["error", "latest"]
TIMESTAMP_STRATEGIES: tuple[str, ...] = get_args(TimestampStrategy)


@dataclass(frozen=True)
class AtTimestamp:
    """Start at the first record whose timestamp is at or after ``ms`` (ms since the epoch)."""

    ms: int


#: A starting rule for one partition: a real offset, EARLIEST, LATEST or a timestamp.
StartRule = int | AtTimestamp


@dataclass(frozen=True)
class StartingOffsets:
    """Where partitions with no committed offset start (see the module documentation).

    ``default`` applies to partitions ``per_partition`` does not list. ``timestamp_strategy``
    says what an :class:`AtTimestamp` with no record that late becomes.
    """

    default: StartRule = LATEST
    per_partition: Mapping[TopicPartition, StartRule] = field(default_factory=dict)
    timestamp_strategy: TimestampStrategy = "error"

    def for_partition(self, tp: TopicPartition) -> StartRule:
        """The starting rule of ``tp``."""
        return self.per_partition.get(tp, self.default)


def parse_starting(options: Mapping[str, str]) -> StartingOffsets:
    """The starting rules from a source's options (names as documented, values as given).

    Raises :class:`OptionError` naming the option at fault.
    """
    strategy_raw = options.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy_raw not in TIMESTAMP_STRATEGIES:
        raise OptionError(
            "startingOffsetsByTimestampStrategy",
            f"unknown value {strategy_raw!r}; use one of {', '.join(TIMESTAMP_STRATEGIES)}",
        )
    strategy: TimestampStrategy = "latest" if strategy_raw == "latest" else "error"
    if "startingTimestamp" in options:
        ms = _timestamp("startingTimestamp", None, options["startingTimestamp"])
        return StartingOffsets(AtTimestamp(ms), {}, strategy)
    if "startingOffsetsByTimestamp" in options:
        by_time = _per_partition(
            "startingOffsetsByTimestamp",
            options["startingOffsetsByTimestamp"],
            lambda where, v: AtTimestamp(_timestamp("startingOffsetsByTimestamp", where, v)),
            example='{"topic":{"0":1700000000000}}',
        )
        return StartingOffsets(LATEST, by_time, strategy)
    return _starting_offsets(options.get("startingOffsets", "latest"))


def _starting_offsets(raw: str) -> StartingOffsets:
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return StartingOffsets(EARLIEST if text.lower() == "earliest" else LATEST)
    return StartingOffsets(
        LATEST,
        _per_partition("startingOffsets", text, _offset, example='{"topic":{"0":23}}'),
        "error",
    )


def _offset(where: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < EARLIEST:
        raise OptionError(
            "startingOffsets",
            f"{where}: offset must be -2 (earliest), -1 (latest) or >= 0, got {value!r}",
        )
    return value


def _timestamp(option: str, where: str | None, value: object) -> int:
    """``value`` as a timestamp in ms (an int, or a string of one, >= 0); ``where`` names
    the partition inside a JSON option."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OptionError(
            option,
            f"{where + ': ' if where else ''}a timestamp is milliseconds since the epoch "
            f"(an integer >= 0), got {value!r}",
        )
    return value


def _per_partition(
    name: str, raw: str, convert: Callable[[str, object], StartRule], example: str
) -> dict[TopicPartition, StartRule]:
    """``{"topic": {"partition": value}}`` -> rules, each value through ``convert``."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        expected = "earliest, latest or JSON like" if name == "startingOffsets" else "JSON like"
        raise OptionError(name, f"expected {expected} {example}: {exc}") from None
    if not isinstance(parsed, dict):
        raise OptionError(name, "JSON must be an object of topics")
    out: dict[TopicPartition, StartRule] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise OptionError(name, f"topic {topic!r} must map partition numbers to values")
        for part, value in parts.items():
            try:
                partition = int(part)
            except ValueError:
                raise OptionError(name, f"{topic!r}: partition {part!r} is not a number") from None
            out[TopicPartition(topic, partition)] = convert(f"{topic}-{partition}", value)
    return out
