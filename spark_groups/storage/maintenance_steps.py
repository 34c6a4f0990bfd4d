"""The maintenance steps every Delta table of spark_groups shares: compact, vacuum, checkpoint.

Who runs them, and when, is each table's own business: the ledger
(:mod:`spark_groups.ledger.self_maintenance`), the sink's table
(:mod:`spark_groups.sink.live_maintenance`). None of them touches Delta transaction ids: they
stay in the snapshot, and the checkpoint carries them. delta-rs does not detect two
concurrent ``optimize.compact`` runs of one table as conflicting (both commit, each re-adding
the same rows): callers keep compactions of a table apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_groups.storage.commit_lock import commits_of

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: Delta's default of ``delta.deletedFileRetentionDuration``: 7 days.
DEFAULT_DELETED_FILE_RETENTION_HOURS = 7 * 24.0

_UNIT_HOURS = {
    "second": 1 / 3600,
    "minute": 1 / 60,
    "hour": 1.0,
    "day": 24.0,
    "week": 168.0,
}
_INTERVAL = re.compile(r"^\s*interval\s+(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class FileCount:
    """The active data files of one table version: how many, and their bytes."""

    files: int
    bytes: int


def active_files(table: DeltaTable) -> FileCount:
    """How many data files the table's current snapshot references, and their total size."""
    sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    return FileCount(len(sizes), sum(int(size) for size in sizes))


def compact(
    table: DeltaTable, commit_info: dict[str, str], target_size: int | None = None
) -> dict[str, Any]:
    """Rewrite the table's small files into files of about ``target_size`` bytes (None: the
    table's ``delta.targetFileSize``, else delta-rs' 100 MiB), in one commit carrying
    ``commit_info``; delta-rs' metrics. Never run two at once on one table (module doc)."""
    from deltalake import CommitProperties

    with commits_of(table):  # delta-rs commits inside the call
        table.update_incremental()  # include a compaction that just finished elsewhere
        return table.optimize.compact(
            target_size=target_size,
            commit_properties=CommitProperties(custom_metadata=dict(commit_info)),
        )


def duration_hours(text: str | None, default: float) -> float:
    """A Delta interval property (``interval 2 hours``) in hours; ``default`` when it is None
    or not an interval."""
    match = _INTERVAL.match(text or "")
    if match is None or match.group(2).lower() not in _UNIT_HOURS:
        return default
    return float(match.group(1)) * _UNIT_HOURS[match.group(2).lower()]


def deleted_file_retention_hours(table: DeltaTable) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` in hours (Delta's 7 days when not
    set): how long a file removed by a commit stays for readers of older snapshots."""
    text = table.metadata().configuration.get("delta.deletedFileRetentionDuration")
    return duration_hours(text, DEFAULT_DELETED_FILE_RETENTION_HOURS)


def vacuum(
    table: DeltaTable,
    retention_hours: int | None = None,
    commit_info: dict[str, str] | None = None,
    *,
    full: bool = False,
) -> list[str]:
    """Delete data files the table no longer references, older than ``retention_hours``
    (None: the table's ``delta.deletedFileRetentionDuration``); the files deleted. delta-rs
    refuses a retention below the table's own.

    *Lite* mode (the default): only files named by a remove action still in the snapshot; a
    file whose tombstone a checkpoint dropped is never found again. ``full``: Delta's own
    VACUUM, every unreferenced file whose removal (or, for files no commit names, last write)
    is older than the retention; safe beside running writers only while the retention exceeds
    the time any writer's file stays uncommitted."""
    from deltalake import CommitProperties

    return table.vacuum(
        retention_hours=retention_hours,
        dry_run=False,
        enforce_retention_duration=True,
        full=full,
        commit_properties=CommitProperties(custom_metadata=dict(commit_info or {})),
    )


def checkpoint_and_clean_log(table: DeltaTable) -> None:
    """Write a checkpoint of the newest version (opening the table then reads it instead of
    replaying every JSON commit), then delete log entries older than
    ``delta.logRetentionDuration`` that lie before a checkpoint (Delta's own rule: every kept
    version stays loadable)."""
    table.update_incremental()
    table.create_checkpoint()
    table.cleanup_metadata()
