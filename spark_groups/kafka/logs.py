"""librdkafka's own log lines, through Python logging, with repeats folded.

Every client spark_groups creates gets a :class:`LibrdkafkaLog` (:func:`with_logger`), so its
lines reach the ``spark_groups.kafka.librdkafka`` logger instead of stderr, at Python's level
for librdkafka's syslog level (:data:`SYSLOG_LEVELS`). confluent-kafka serves them on the
client's own thread, inside ``poll``/``consume``; the native read path hands them back with
its other events. A line repeated by the same client (same level and text, its "after N ms"
left out) is logged once, then counted, and logged again at most every :data:`FOLD_S` seconds
with how often it came. Secrets in a line are scrubbed. docs/operations.md, "Logs:
spark_groups' and librdkafka's".
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_groups.secrets import scrub

#: The logger every librdkafka line goes to.
LOGGER_NAME = "spark_groups.kafka.librdkafka"
#: How long repeats of one line are only counted.
FOLD_S = 5.0
#: librdkafka's syslog level -> Python's.
SYSLOG_LEVELS = {
    0: logging.CRITICAL,
    1: logging.CRITICAL,
    2: logging.CRITICAL,
    3: logging.ERROR,
    4: logging.WARNING,
    5: logging.INFO,
    6: logging.INFO,
    7: logging.DEBUG,
}
#: Lines remembered for folding, per client; the oldest go first past this.
_MAX_LINES = 256
_VARYING = re.compile(r"\s*\(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)")


@dataclass
class _Seen:
    logged_at: float
    repeats: int = 0


class FoldedLog:
    """Lines for ``logger`` with repeats folded (see the module doc); thread-safe."""

    def __init__(self, logger: logging.Logger, fold_s: float = FOLD_S) -> None:
        """Fold repeats of the same level and text within ``fold_s`` seconds."""
        self.logger = logger
        self._fold_s = fold_s
        self._seen: dict[tuple[int, str], _Seen] = {}
        self._lock = threading.Lock()

    def log(self, level: int, text: str) -> None:
        """Log ``text`` at ``level``, or count it when it was logged less than ``fold_s``
        ago."""
        if not self.logger.isEnabledFor(level):
            return
        key = (level, _VARYING.sub("", text))
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.logged_at < self._fold_s:
                seen.repeats += 1
                return
            repeats = seen.repeats if seen is not None else 0
            since = now - seen.logged_at if seen is not None else 0.0
            self._seen.pop(key, None)
            self._seen[key] = _Seen(now)
            while len(self._seen) > _MAX_LINES:
                del self._seen[next(iter(self._seen))]
        if repeats:
            self.logger.log(level, "%s (%d more times in the last %.1f s)", text, repeats, since)
        else:
            self.logger.log(level, "%s", text)


class LibrdkafkaLog:
    """confluent-kafka's ``logger`` for one client: ``log(level, fmt, *args)`` as
    confluent-kafka calls it (Python levels), and :meth:`syslog` for the native read path's
    lines (librdkafka's levels). ``secrets`` are the client's settings, scrubbed from lines."""

    def __init__(self, secrets: Mapping[str, object] | None = None, fold_s: float = FOLD_S) -> None:
        """A logger for one client; nothing is logged until librdkafka says something."""
        self._folded = FoldedLog(logging.getLogger(LOGGER_NAME), fold_s)
        self._secrets = {k: v for k, v in (secrets or {}).items() if isinstance(v, str)}

    def log(self, level: int, fmt: str, *args: object) -> None:
        """One line from confluent-kafka (``level`` is Python's)."""
        if self._folded.logger.isEnabledFor(level):
            self._folded.log(level, scrub(fmt % args if args else fmt, self._secrets))

    def syslog(self, level: int, facility: str, message: str) -> None:
        """One line from the native read path (``level`` is librdkafka's syslog level)."""
        python_level = SYSLOG_LEVELS.get(level, logging.DEBUG)
        if self._folded.logger.isEnabledFor(python_level):
            self._folded.log(python_level, scrub(f"{facility} {message}", self._secrets))


def with_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with a :class:`LibrdkafkaLog` as its ``logger`` (unless it has one)."""
    out = dict(config)
    out.setdefault("logger", LibrdkafkaLog(config))
    return out
