"""A source's options parsed, each error naming its option; shared by the two sources.

:class:`OptionTable` splits a source's option map by its table of options; each parser of
:class:`GivenOptions` names the option in its :class:`OptionError` and says what it expected.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from spark_groups.errors import OptionError
from spark_groups.storage.object_stores import STORAGE_PREFIX
from spark_groups.storage.paths import resolve

KAFKA_PREFIX = "kafka."
#: Options passed to the schema registry client (spark_groups.options.formats).
REGISTRY_PREFIX = "schema.registry."


@dataclass(frozen=True)
class OptionTable:
    """The options of the source ``source``: each documented name with its default
    (``defaults``; None: none), the keys it refuses with the reason (``refused``, lower-cased:
    ``OptionError(key, reason)``), and what an unknown key is told (``unknown``, formatted
    with the ``key`` and a did-you-mean ``hint``)."""

    source: str
    defaults: Mapping[str, str | None]
    refused: Mapping[str, str]
    unknown: str

    def split(self, options: Mapping[str, str]) -> GivenOptions:
        """``options`` as given (keys in any case, as Spark lower-cases them; values as
        text); ``storage.*`` ones are left to ``storage_options_of``. Raises
        :class:`OptionError` naming the first key that is ``path`` (a source takes none),
        refused or unknown."""
        names = {name.lower(): name for name in self.defaults}
        ours: dict[str, str] = {}
        kafka: dict[str, str] = {}
        for key, value in options.items():
            lower = key.lower()
            if lower == "path":  # Spark may pass load()'s argument
                raise OptionError("path", f"the {self.source} source takes no path; use subscribe")
            if lower in self.refused:
                raise OptionError(key, self.refused[lower])
            if lower.startswith(KAFKA_PREFIX):
                kafka[lower[len(KAFKA_PREFIX) :]] = str(value)
            elif lower.startswith((STORAGE_PREFIX, REGISTRY_PREFIX)) and lower not in (
                STORAGE_PREFIX,
                REGISTRY_PREFIX,
            ):
                continue  # parsed by storage_options_of and parse_formats
            elif lower in names:
                ours[names[lower]] = str(value)
            else:
                guesses = difflib.get_close_matches(key, list(names), n=1)
                hint = f"; did you mean '{names[guesses[0]]}'?" if guesses else ""
                raise OptionError(key, self.unknown.format(key=key, hint=hint))
        return GivenOptions(self, ours, kafka)


@dataclass(frozen=True)
class GivenOptions:
    """A source's options as given: its own under their documented names (``ours``), the
    ``kafka.*`` ones without the prefix (``kafka``). Each method parses one of ``ours`` (the
    table's default when it was not given) and names it in its :class:`OptionError`."""

    table: OptionTable
    ours: dict[str, str]
    kafka: dict[str, str]

    def raw(self, name: str) -> str:
        return self.ours.get(name, self.table.defaults[name] or "")

    def boolean(self, name: str) -> bool:
        raw = self.raw(name)
        value = raw.strip().lower()
        if value in ("true", "false"):
            return value == "true"
        raise OptionError(name, f"expected true or false, got {raw!r}")

    def whole_number(self, name: str, least: int = 1) -> int:
        """A whole number, ``least`` or more (by default: greater than 0)."""
        raw = self.raw(name)
        try:
            value = int(raw.strip())
        except ValueError:
            raise OptionError(name, f"expected a whole number, got {raw!r}") from None
        if value < least:
            bound = "greater than 0" if least == 1 else f"{least} or more"
            raise OptionError(name, f"must be {bound}, got {value}")
        return value

    def optional_whole_number(self, name: str) -> int | None:
        """A whole number greater than 0, None when it is not given."""
        return self.whole_number(name) if name in self.ours else None

    def duration_ms(self, name: str) -> int:
        """A duration the way Spark writes them (``15m``, ``30s``, ``500ms``; a bare number
        is milliseconds) in whole milliseconds."""
        raw = self.raw(name)
        match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
        if match is None or match.group(2) not in ("", *_DURATION_UNITS_MS):
            raise OptionError(
                name,
                f"expected a duration such as 15m, 30s or 500ms (a number and a unit), got {raw!r}",
            )
        number, unit = int(match.group(1)), match.group(2) or "ms"
        return int(number * _DURATION_UNITS_MS[unit])

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        """The value spelled as in ``choices`` (which it matches ignoring case)."""
        given = self.raw(name).strip()
        for choice in choices:
            if given.lower() == choice.lower():
                return choice
        raise OptionError(name, f"unknown value {given!r}; use one of {', '.join(choices)}")

    def path(self, name: str) -> str | None:
        """A table or checkpoint path as delta-rs and pyarrow take it (None when not given);
        a :class:`~spark_groups.errors.StoragePathError` when neither can."""
        given = self.ours.get(name, "").strip()
        return resolve(given, name) if given else None


#: Spark's time units (``Utils.timeStringAsMs``) in milliseconds.
_DURATION_UNITS_MS: dict[str, float] = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def pattern(raw: str) -> str:
    """``subscribePattern``: a regular expression Python compiles."""
    try:
        re.compile(raw)
    except re.error as exc:
        raise OptionError("subscribePattern", f"not a valid regular expression: {exc}") from None
    return raw


def topics(raw: str) -> tuple[str, ...]:
    """``subscribe``: comma-separated Kafka topic names, at least one."""
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise OptionError("subscribe", "needs at least one topic name")
    bad = [t for t in topics if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t)]
    if bad:
        raise OptionError("subscribe", f"not a valid Kafka topic name: {bad[0]!r}")
    return topics
