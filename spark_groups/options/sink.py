"""Options of the exactly-once Delta sink ``delta-group`` (see docs/sink.md).

Spark hands a Python data sink its ``writeStream`` options with lower-cased keys, plus
``path`` (from ``.start(path)`` or ``.option("path", ...)``), ``checkpointLocation`` (when it
was given as an option) and ``queryName`` (when the query has one). Other unknown options are
refused, like the source does, so a typo fails the query at start instead of being ignored.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_groups.errors import OptionError
from spark_groups.storage.files import check_location
from spark_groups.storage.object_stores import STORAGE_PREFIX, check_commit_safety

#: option name (as documented) -> default shown in docs; None means "no default".
SINK_OPTIONS: dict[str, str | None] = {
    "path": None,
    "group.id": None,
    "checkpointLocation": None,
    "partitionBy": None,
    "mergeSchema": "false",
    "failOnGap": "true",
    "member": None,
    "compression": "snappy",
    "compactEvery": "100",
    "sharedMount": "false",
}

#: Parquet codecs accepted by ``compression`` (what pyarrow writes and Delta readers read).
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")

#: Options Spark itself adds to a sink's options (lower-cased); accepted and not used.
SPARK_OPTIONS = frozenset({"queryname"})

_BY_LOWER = {name.lower(): name for name in SINK_OPTIONS}
_ALIASES = {"kafka.group.id": "group.id"}


@dataclass(frozen=True)
class SinkOptions:
    """The parsed, validated options of one ``delta-group`` query. ``path`` and ``group_id``
    are None when not given: the sink then takes them from the ``kafka-group`` source that
    planned the batch (``spark_groups.sink.pipeline``)."""

    path: str | None
    group_id: str | None
    checkpoint: str
    partition_by: tuple[str, ...] | None = None
    merge_schema: bool = False
    fail_on_gap: bool = True
    member: str = field(default_factory=socket.gethostname)
    compression: str = "snappy"
    compact_every: int = 100
    shared_mount: bool = False
    storage_options: dict[str, str] | None = field(default=None, repr=False)


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(name, f"must be 'true' or 'false', got {raw!r}")
    return value == "true"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate ``options`` (as Spark passes them) into :class:`SinkOptions`.

    Raises :class:`~spark_groups.errors.OptionError` naming the option at fault. Values of
    ``storage.*`` options are never shown (they may be credentials).
    """
    ours: dict[str, str] = {}
    storage: dict[str, str] = {}
    for key, value in options.items():
        lower = str(key).lower()
        if lower.startswith(STORAGE_PREFIX) and len(lower) > len(STORAGE_PREFIX):
            storage[lower[len(STORAGE_PREFIX) :]] = str(value)
            continue
        if lower in SPARK_OPTIONS:
            continue
        name = _ALIASES.get(lower) or _BY_LOWER.get(lower)
        if name is None:
            raise OptionError(
                str(key),
                "unknown option of the delta-group sink; known options are "
                f"{', '.join(SINK_OPTIONS)} and storage.* (see docs/sink.md)",
            )
        if name in ours:
            raise OptionError(name, "given twice (once through an alias)")
        ours[name] = str(value)

    path: str | None = ours.get("path", "").strip() or None
    if path is not None:
        path = check_location(path, storage, option="path")
        check_commit_safety(path, storage, "path", prefix=STORAGE_PREFIX)
    group_id = ours.get("group.id", "").strip() or None
    checkpoint = ours.get("checkpointLocation", "").strip()
    if checkpoint:
        checkpoint = check_location(checkpoint, storage, option="checkpointLocation")
    else:
        raise OptionError(
            "checkpointLocation",
            "required as a writeStream option: the sink reads each batch's planned offset "
            "ranges from the query's checkpoint (spark.sql.streaming.checkpointLocation is "
            "not passed to data sinks)",
        )
    partition_by: tuple[str, ...] | None = None
    if "partitionBy" in ours:
        columns = tuple(c.strip() for c in ours["partitionBy"].split(",") if c.strip())
        if len(set(columns)) != len(columns):
            raise OptionError("partitionBy", f"a column is listed twice: {ours['partitionBy']!r}")
        partition_by = columns
    compression = ours.get("compression", "snappy").strip().lower()
    if compression not in COMPRESSIONS:
        raise OptionError(
            "compression", f"use one of {', '.join(COMPRESSIONS)}, got {compression!r}"
        )
    member = ours.get("member", "").strip() or socket.gethostname()
    compact_raw = ours.get("compactEvery", "100").strip()
    if not compact_raw.isdigit():
        raise OptionError(
            "compactEvery", f"a number of table versions (0: never), got {compact_raw!r}"
        )
    return SinkOptions(
        path=path,
        group_id=group_id,
        checkpoint=checkpoint,
        partition_by=partition_by,
        merge_schema=_bool("mergeSchema", ours.get("mergeSchema", "false")),
        fail_on_gap=_bool("failOnGap", ours.get("failOnGap", "true")),
        member=member,
        compression=compression,
        shared_mount=_bool("sharedMount", ours.get("sharedMount", "false")),
        storage_options=storage or None,
        compact_every=int(compact_raw),
    )
