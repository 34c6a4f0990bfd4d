"""Spark's checkpoint, read by the source and the sink: which batch read what, which finished.

``<checkpoint>/offsets/<id>`` is written before Spark batch ``id`` runs (a ``kafka-group``
source's line is its :class:`BatchOffset`); ``<checkpoint>/commits/<id>`` once it finished,
its sink included, which is what makes the batch durable. Both are read with pyarrow, never
with Spark's Hadoop file systems: a checkpoint on S3 is reached with the query's
``storage.*`` options or pyarrow's defaults, and :func:`check_readable` fails a query at its
start when they do not reach it. Spark runs a batch without new data under the next id with
the previous offsets, so :func:`spark_batch_id` finds a batch's id by its offsets, never by
the source's batch number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow.fs as pafs

from spark_groups.errors import OptionError
from spark_groups.offsets import FORMAT_VERSION, BatchOffset
from spark_groups.secrets import scrub
from spark_groups.storage.files import Location, location
from spark_groups.storage.object_stores import STORAGE_PREFIX, is_s3

#: The option that names a query's checkpoint (the source's and the sink's).
CHECKPOINT_OPTION = "checkpointLocation"


def offset_log_path(checkpoint: str, batch_id: int) -> str:
    """Where Spark keeps the offsets of Spark batch ``batch_id`` in ``checkpoint``."""
    return f"{checkpoint.rstrip('/')}/offsets/{batch_id}"


def commit_log_path(checkpoint: str, batch_id: int) -> str:
    """Where Spark marks Spark batch ``batch_id`` finished in ``checkpoint``."""
    return f"{checkpoint.rstrip('/')}/commits/{batch_id}"


def kafka_group_offset(line: str) -> dict[str, Any] | None:
    """The JSON of a ``kafka-group`` source offset on one offset-log line, or None for any
    other line (Spark's metadata, ``-`` for a source without an offset, other sources)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if isinstance(value, dict) and value.get("v") == FORMAT_VERSION and "ranges" in value:
        return value
    return None


def _batches_in(text: str) -> list[BatchOffset]:
    """The ``kafka-group`` offsets in one offset-log file (unreadable lines skipped)."""
    out = []
    for line in text.splitlines()[2:]:
        value = kafka_group_offset(line)
        if value is None:
            continue
        try:
            out.append(BatchOffset.from_json(value))
        except Exception:  # another source's JSON that happens to look like ours
            continue
    return out


def _logged_ids(offsets: Location) -> list[int]:
    """The Spark batch ids in the offset log ``offsets``, newest first ([] when missing)."""
    try:
        infos = offsets.fs.get_file_info(pafs.FileSelector(offsets.path, allow_not_found=True))
    except NotADirectoryError:
        return []
    names = (info.base_name for info in infos if info.type == pafs.FileType.File)
    return sorted((int(name) for name in names if name.isdigit()), reverse=True)


def unreadable(
    checkpoint: str, exc: BaseException, storage_options: Mapping[str, str] | None = None
) -> OptionError:
    """The :class:`~spark_groups.errors.OptionError` (on ``checkpointLocation``) for a
    checkpoint the driver's Python could not read (``exc``), saying what to set. The error's
    text is scrubbed of the storage options' secrets."""
    detail = scrub(f"{type(exc).__name__}: {exc}", storage_options or {})
    if is_s3(checkpoint):
        advice = (
            "spark_groups reads Spark's checkpoint with pyarrow, which does not see Spark's "
            "fs.s3a.* settings: give this query the storage.* options that reach it "
            f"({STORAGE_PREFIX}aws_access_key_id, {STORAGE_PREFIX}aws_secret_access_key, "
            f"{STORAGE_PREFIX}aws_endpoint_url, {STORAGE_PREFIX}aws_region; the same as for "
            "tables on S3), or the AWS_* environment variables on the driver (docs/storage.md)"
        )
    else:
        advice = "give a path the driver's Python can read (local, file:, or a URI pyarrow knows)"
    problem = f"cannot read the checkpoint {checkpoint!r}: {detail}. To fix it, {advice}"
    return OptionError(CHECKPOINT_OPTION, problem)


def check_readable(checkpoint: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Make sure the driver's Python reaches ``checkpoint`` (one metadata request; a
    checkpoint Spark has not created yet is fine). Raises
    :class:`~spark_groups.errors.OptionError` from :func:`unreadable` when it does not:
    wrong or missing credentials, endpoint or region of a checkpoint on S3."""
    try:
        loc = location(checkpoint, storage_options, option=CHECKPOINT_OPTION)
        loc.fs.get_file_info(loc.path)
    except Exception as exc:
        raise unreadable(checkpoint, exc, storage_options) from exc


def spark_batch_id(
    checkpoint: str, batch: BatchOffset, storage_options: Mapping[str, str] | None = None
) -> int | None:
    """The Spark batch id whose offset-log entry is ``batch`` (this source's plan), or None
    when no entry is (the batch was planned but Spark has not logged it yet, or
    ``checkpoint`` is not this query's).

    The log is read from its newest entry back, and only as far as entries of this batch or
    later: usually one or two files. A batch Spark ran again without new data has several
    entries; the first is the one that read the records. ``storage_options`` configure the
    file system of a checkpoint on an object store (:func:`spark_groups.storage.files.location`).
    """
    found = None
    for batch_id, logged in _entries(checkpoint, storage_options):
        if batch in logged:
            found = batch_id
        elif all(b.batch < batch.batch for b in logged):
            break
    return found


def is_committed(
    checkpoint: str, batch_id: int, storage_options: Mapping[str, str] | None = None
) -> bool:
    """Whether Spark has marked Spark batch ``batch_id`` finished in ``checkpoint``."""
    loc = location(
        commit_log_path(checkpoint, batch_id), storage_options, option="checkpointLocation"
    )
    return loc.exists(loc.path)


def latest_logged(
    checkpoint: str, storage_options: Mapping[str, str] | None = None
) -> BatchOffset | None:
    """This source's offsets in the newest entry of the offset log that has them (None when
    no entry has): where a restarted query stands, for a Spark that does not tell the source
    (4.0 and 4.1 call ``latestOffset()`` without a start)."""
    for _, logged in _entries(checkpoint, storage_options):
        if logged:
            return max(logged, key=lambda b: b.batch)
    return None


def newest_entry(
    checkpoint: str, storage_options: Mapping[str, str] | None = None
) -> tuple[int, list[BatchOffset]] | None:
    """(Spark batch id, this source's offsets in it) of the newest offset-log entry, the
    offsets empty when that entry holds none of this source's; None when the log is empty."""
    for entry in _entries(checkpoint, storage_options):
        return entry
    return None


def _entries(
    checkpoint: str, storage_options: Mapping[str, str] | None
) -> Iterator[tuple[int, list[BatchOffset]]]:
    """(Spark batch id, this source's offsets in it) of the offset log, newest first, read
    one file at a time (entries Spark purged meanwhile are passed over)."""
    offsets = location(
        f"{checkpoint.rstrip('/')}/offsets", storage_options, option=CHECKPOINT_OPTION
    )
    for batch_id in _logged_ids(offsets):
        try:
            yield batch_id, _batches_in(offsets.read_text(offsets.child(str(batch_id))))
        except FileNotFoundError:  # purged by Spark meanwhile
            continue
