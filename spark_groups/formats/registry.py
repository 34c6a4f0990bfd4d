"""The schema registry as the read path uses it: one client per worker, every schema cached.

:func:`registry_for` keeps one :class:`Registry` per settings in each Python worker, so a
schema id is looked up once per process. Every call is retried while the registry is
unreachable or answers 5xx/429, for at most ``schemaRegistryTimeoutMs``; then, as for refused
credentials or a missing subject, a :class:`~spark_groups.errors.SchemaRegistryError` names
the URL (without credentials). No call ever answers with a made-up schema.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

from spark_groups.errors import OptionError, SchemaRegistryError
from spark_groups.options.formats import REGISTRY_PREFIX, ColumnFormat, redact_url
from spark_groups.secrets import scrub

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Registry error codes of a missing subject (40401), version (40402) or schema (40403).
_NOT_FOUND = (40401, 40402, 40403)
_BACKOFF_S = (0.2, 5.0)


@dataclass(frozen=True)
class ReaderSchema:
    """The schema a column is decoded to: its id, text, type (``AVRO``, ``PROTOBUF``,
    ``JSON``) and the named schemas it references (name -> text)."""

    schema_id: int
    text: str
    schema_type: str
    references: tuple[tuple[str, str], ...] = ()
    subject: str | None = None
    version: int | None = None


class Registry:
    """One schema registry's client (confluent-kafka's ``SchemaRegistryClient``) in this
    process; thread-safe, schemas by id cached for the life of the process."""

    def __init__(self, settings: Mapping[str, Any], timeout_ms: int) -> None:
        try:
            import fastavro  # noqa: F401  (the decoder's; checked here, at the start)
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError as exc:
            raise OptionError(
                "value.format",
                "a registry format needs confluent-kafka's schema-registry client and fastavro, "
                f"which are not installed here ({exc}): pip install 'spark-groups[registry]'",
            ) from None

        self.url = redact_url(str(settings.get("url", "")))
        self._settings = dict(settings)
        self._timeout_s = timeout_ms / 1000.0
        try:
            self._client = SchemaRegistryClient(dict(settings))
        except (ValueError, TypeError) as exc:
            raise _option_error(exc, self._settings) from None
        self._by_id: dict[tuple[int, str | None], ReaderSchema | None] = {}
        self._lock = threading.Lock()

    def by_id(self, schema_id: int, fmt: str | None = None) -> ReaderSchema | None:
        """The schema with ``schema_id``, None when the registry has none of that id. ``fmt``
        asks for a form of it (``serialized``: Protobuf's base64 descriptor, where the
        registry has that form)."""
        key = (schema_id, fmt)
        with self._lock:
            if key in self._by_id:
                return self._by_id[key]
        schema = self._call(
            lambda: self._client.get_schema(schema_id, fmt=fmt), schema_id=schema_id
        )
        found = None if schema is None else self._resolved(schema_id, schema, fmt)
        with self._lock:
            self._by_id[key] = found
        return found

    def reader_schema(self, column: ColumnFormat, topics: tuple[str, ...]) -> ReaderSchema:
        """``column``'s reader schema: by id, or each subject's version (the latest by
        default); the subjects of ``topics`` must hold the same schema."""
        fmt = "serialized" if column.format == "protobuf-confluent" else None
        if column.schema_id is not None:
            found = self.by_id(column.schema_id, fmt)
            if found is None:
                raise SchemaRegistryError(
                    f"the schema registry at {self.url} has no schema with id "
                    f"{column.schema_id} ({column.column}.schema.id)",
                    url=self.url,
                    schema_id=column.schema_id,
                )
            return found
        found_per_subject = [
            self._version(subject, column, fmt) for subject in column.subjects(topics)
        ]
        first = found_per_subject[0]
        for other in found_per_subject[1:]:
            if other.text != first.text:
                raise OptionError(
                    f"{column.column}.subject",
                    f"the subjects {first.subject} and {other.subject} hold different schemas "
                    f"(ids {first.schema_id} and {other.schema_id}): a column has one type; "
                    f"name the subject of the reader schema with {column.column}.subject",
                )
        return first

    def _version(self, subject: str, column: ColumnFormat, fmt: str | None) -> ReaderSchema:
        version: int | Literal["latest"] = "latest" if column.version is None else column.version
        registered = self._call(
            lambda: self._client.get_version(subject, version, fmt=fmt), subject=subject
        )
        if registered is None:
            what = "no versions" if version == "latest" else f"no version {version}"
            raise SchemaRegistryError(
                f"the schema registry at {self.url} has {what} of subject {subject!r} (the "
                f"{column.column} column's reader schema; check {column.column}.subject, "
                f"{column.column}.subject.name.strategy or that the producers registered it)",
                url=self.url,
                subject=subject,
            )
        resolved = self._resolved(int(registered.schema_id or 0), registered.schema, fmt)
        return ReaderSchema(
            resolved.schema_id,
            resolved.text,
            resolved.schema_type,
            resolved.references,
            subject,
            registered.version,
        )

    def _resolved(self, schema_id: int, schema: Any, fmt: str | None) -> ReaderSchema:
        """A registry schema with the texts of its references (depth first, each once)."""
        refs: dict[str, str] = {}

        def visit(references: Any) -> None:
            for ref in references or ():
                if ref.name in refs:
                    continue
                got: Any = self._call(
                    partial(self._client.get_version, ref.subject, ref.version, fmt=fmt),
                    subject=ref.subject,
                )
                if got is None:
                    raise SchemaRegistryError(
                        f"the schema registry at {self.url} has no version {ref.version} of "
                        f"subject {ref.subject!r}, referenced by schema id {schema_id}",
                        url=self.url,
                        subject=ref.subject,
                        schema_id=schema_id,
                    )
                visit(got.schema.references)
                refs[ref.name] = str(got.schema.schema_str)

        visit(schema.references)
        return ReaderSchema(
            schema_id, schema.schema_str, schema.schema_type or "AVRO", tuple(refs.items())
        )

    def _call(
        self, fn: Callable[[], T], *, subject: str | None = None, schema_id: int | None = None
    ) -> T | None:
        """``fn()``; None when the registry says the subject, version or id does not exist.
        Retried while the registry is unreachable, for at most the timeout."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError as Refused

        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return fn()
            except Refused as exc:
                if exc.error_code in _NOT_FOUND or exc.http_status_code == 404:
                    return None
                if exc.http_status_code in (401, 403):
                    raise SchemaRegistryError(
                        f"the schema registry at {self.url} refused the credentials (HTTP "
                        f"{exc.http_status_code}): check the {REGISTRY_PREFIX}basic.auth.* or "
                        f"{REGISTRY_PREFIX}bearer.auth.* options",
                        url=self.url,
                        subject=subject,
                        schema_id=schema_id,
                    ) from None
                retriable = exc.http_status_code >= 500 or exc.http_status_code in (-1, 429)
                why = self._text(exc)
            except Exception as exc:  # the transport's: refused, reset, timed out, DNS
                if type(exc).__module__.split(".")[0] not in ("httpx", "httpcore", "httpx2"):
                    raise
                retriable, why = True, self._text(exc)
            waited = time.monotonic() - started
            if not retriable or waited >= self._timeout_s:
                raise SchemaRegistryError(
                    f"the schema registry at {self.url} did not answer"
                    + (f" within {waited:.0f} s (schemaRegistryTimeoutMs)" if retriable else "")
                    + f": {why}",
                    url=self.url,
                    subject=subject,
                    schema_id=schema_id,
                    waited_s=waited,
                ) from None
            attempt += 1
            pause = min(_BACKOFF_S[1], _BACKOFF_S[0] * 2**attempt) * random.uniform(0.5, 1.0)
            log.warning(
                "schema registry %s: %s; retrying in %.1f s (for %.0f s more at most)",
                self.url, why, pause, self._timeout_s - waited,
            )  # fmt: skip
            time.sleep(min(pause, max(self._timeout_s - waited, 0.0)))

    def _text(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return redact_url(scrub(text, self._settings))


_registries: dict[tuple[tuple[str, Any], ...], Registry] = {}
_registries_lock = threading.Lock()


def registry_for(settings: Mapping[str, Any], timeout_ms: int) -> Registry:
    """This process's :class:`Registry` for ``settings`` (made on first use)."""
    key = (*sorted(settings.items()), ("timeout_ms", timeout_ms))
    with _registries_lock:
        found = _registries.get(key)
        if found is None:
            found = _registries[key] = Registry(settings, timeout_ms)
        return found


def _option_error(exc: BaseException, settings: Mapping[str, Any]) -> OptionError:
    """confluent-kafka's refusal of a registry setting, naming the option."""
    text = str(exc)
    name = "url"
    if text.startswith("Unrecognized properties: "):
        name = text.split(": ", 1)[1].split(",")[0].strip()
    else:
        for key in settings:
            if key in text:
                name = key
                break
    return OptionError(REGISTRY_PREFIX + name, redact_url(scrub(text, settings)))
