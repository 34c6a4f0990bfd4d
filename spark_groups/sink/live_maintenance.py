"""Compaction and vacuum of a ``delta-group`` sink table beside running members, through delta-rs.

Safe beside the members (delta-rs is their writer, so wherever their commits are safe): the
sink's commits only add files and a compaction only rewrites committed ones, so delta-rs
rebases either over the other, and neither touches the transaction ids; vacuum deletes
unreferenced files only past the retention, never below :data:`MIN_RETAIN_HOURS_BESIDE_MEMBERS`
while members run. Two compactions at once would duplicate rows, so :func:`optimize` first
takes the table's maintenance lease (:func:`take_lease`): a commit without files setting the
transaction id :func:`lease_id` to when it lapses, which only one of two concurrent runs can
commit. A live lease refuses with :class:`~spark_groups.errors.MaintenanceRunningError`; a
dead run's lease lapses after :data:`LEASE_SECONDS`, or ``take_over``. docs/cli.md,
"optimize" and "vacuum".
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_groups.errors import MaintenanceError, MaintenanceRunningError, OptionError
from spark_groups.sink.sink_table import APP_ID_PREFIX, append_files
from spark_groups.storage.delta import open_table
from spark_groups.storage.files import table_uri
from spark_groups.storage.maintenance_steps import (
    FileCount,
    active_files,
    checkpoint_and_clean_log,
    compact,
    deleted_file_retention_hours,
    vacuum,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.sink.maintenance")

#: How long a compaction's lease lasts: longer than a compaction of a sink table takes.
LEASE_SECONDS = 3600
#: The shortest retention of a vacuum beside running members: longer than a batch, from its
#: tasks writing their files to the commit that references them.
MIN_RETAIN_HOURS_BESIDE_MEMBERS = 1
#: How many times a compaction is tried again after a conflicting commit.
MAX_ATTEMPTS = 5
#: Commit info key of the lease commits: ``{"lease": "taken"|"released", "until": ms}``.
LEASE_KEY = "spark_groups.maintenance"


@dataclass(frozen=True)
class OptimizeResult:
    """What ``optimize`` did: the active files before and after, the table versions, the
    files it removed and added, and how many compactions were tried."""

    before: FileCount
    after: FileCount
    version_before: int
    version_after: int
    removed: int
    added: int
    attempts: int


@dataclass(frozen=True)
class VacuumResult:
    """What ``vacuum`` did: the files deleted, the retention used (hours), the version."""

    deleted: list[str]
    retention_hours: float
    version: int


def lease_id(table: DeltaTable) -> str:
    """The transaction app id of the table's maintenance lease."""
    return f"{APP_ID_PREFIX}:{table.metadata().id}:maintenance"


def _open(path: str, storage_options: dict[str, str] | None) -> DeltaTable:
    try:
        table = open_table(table_uri(path), storage_options)
    except Exception as exc:
        raise MaintenanceError(
            f"table {path}: cannot open it: {type(exc).__name__}: {exc}", path=path
        ) from exc
    if table is None:
        raise MaintenanceError(f"table {path}: there is no Delta table there", path=path)
    return table


def _lease_holder(table: DeltaTable, until_ms: int) -> str:
    """Who took the lease that lapses at ``until_ms`` (from the recent commits' info)."""
    for commit in table.history(50):
        lease = commit.get(LEASE_KEY)
        if lease and json.loads(lease).get("until") == until_ms:
            return str(commit.get("spark_groups.member", "unknown"))
    return "unknown"


def _set_lease(table: DeltaTable, until_ms: int, by: str, state: str) -> None:
    """Commit, on ``table``'s snapshot, the lease id set to ``until_ms`` (no files)."""
    from deltalake import Transaction

    info = {
        "spark_groups.member": by,
        LEASE_KEY: json.dumps({"lease": state, "until": until_ms}, separators=(",", ":")),
    }
    txns = [Transaction(lease_id(table), until_ms)]
    append_files(table, [], tuple(table.metadata().partition_columns), txns, info)


def take_lease(
    path: str,
    storage_options: dict[str, str] | None,
    by: str,
    *,
    take_over: bool = False,
    seconds: float = LEASE_SECONDS,
) -> int:
    """Take the maintenance lease of the table at ``path`` for ``by`` for ``seconds``; the ms
    it lapses at.

    Raises :class:`MaintenanceRunningError` when another run holds it (unless ``take_over``).
    """
    from deltalake.exceptions import CommitFailedError

    for _attempt in range(MAX_ATTEMPTS * 2):
        table = _open(path, storage_options)
        now_ms = int(time.time() * 1000)
        held = table.transaction_version(lease_id(table))
        if held is not None and held > now_ms and not take_over:
            holder = _lease_holder(table, held)
            raise MaintenanceRunningError(
                f"table {path}: a compaction by {holder} holds the maintenance lease until "
                f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(held / 1000))}; two "
                "compactions at once would duplicate rows. Wait for it to end, or, if that "
                "run is certainly dead, run again with --take-over",
                path=path,
                holder=holder,
                expires=held / 1000,
            )
        until_ms = now_ms + int(seconds * 1000)
        try:
            _set_lease(table, until_ms, by, "taken")
        except CommitFailedError:
            continue  # another run set the lease meanwhile: look again
        except Exception as exc:
            raise MaintenanceError(
                f"table {path}: taking the maintenance lease failed ({type(exc).__name__}: "
                f"{exc}); nothing was compacted, run again",
                path=path,
            ) from exc
        return until_ms
    raise MaintenanceError(
        f"table {path}: the maintenance lease kept changing; run again", path=path
    )


def release_lease(
    path: str, storage_options: dict[str, str] | None, by: str, until_ms: int
) -> None:
    """Release the lease taken as ``until_ms``, if this run still holds it (a failure is
    logged: the lease then lapses by itself)."""
    from deltalake.exceptions import CommitFailedError

    for _attempt in range(MAX_ATTEMPTS):
        try:
            table = _open(path, storage_options)
            if table.transaction_version(lease_id(table)) != until_ms:
                log.error(
                    "table %s: another run took the maintenance lease over while %s compacted; "
                    "check the table for rows added twice",
                    path,
                    by,
                )
                return
            _set_lease(table, int(time.time() * 1000), by, "released")
            return
        except CommitFailedError:
            continue
        except Exception as exc:
            log.warning("table %s: releasing the maintenance lease failed: %s", path, exc)
            return
    log.warning("table %s: the maintenance lease kept changing; it lapses by itself", path)


def optimize(
    path: str,
    storage_options: dict[str, str] | None,
    by: str,
    *,
    target_size: int | None = None,
    take_over: bool = False,
    lease_seconds: float = LEASE_SECONDS,
) -> OptimizeResult:
    """Compact the sink table at ``path`` toward ``target_size`` bytes under the maintenance
    lease, then write a checkpoint and clean up expired log entries (module doc).

    A compaction whose commit conflicts is tried again from a fresh snapshot, up to
    :data:`MAX_ATTEMPTS` times; then :class:`MaintenanceError` (nothing committed).
    """
    from deltalake.exceptions import CommitFailedError

    if target_size is not None and target_size <= 0:
        raise OptionError("--target-size", f"must be a positive size, got {target_size}")
    table = _open(path, storage_options)
    version_before, before = table.version(), active_files(table)
    until_ms = take_lease(path, storage_options, by, take_over=take_over, seconds=lease_seconds)
    try:
        info = {"spark_groups.member": by}
        for attempt in range(1, MAX_ATTEMPTS + 1):
            table = _open(path, storage_options)
            try:
                metrics = compact(table, info, target_size)
            except CommitFailedError as exc:
                log.warning("table %s: compaction met a conflicting commit (%s); again", path, exc)
                continue
            except Exception as exc:
                raise MaintenanceError(
                    f"table {path}: the compaction failed ({type(exc).__name__}: {exc}); "
                    "nothing of it was committed, run again",
                    path=path,
                ) from exc
            try:
                checkpoint_and_clean_log(table)
            except Exception as exc:  # the compaction is committed; the next run does this
                log.warning(
                    "table %s: compacted, but the checkpoint or the log clean-up failed: %s: %s",
                    path,
                    type(exc).__name__,
                    exc,
                )
            table = _open(path, storage_options)
            return OptimizeResult(
                before=before,
                after=active_files(table),
                version_before=version_before,
                version_after=table.version(),
                removed=int(metrics.get("numFilesRemoved", 0)),
                added=int(metrics.get("numFilesAdded", 0)),
                attempts=attempt,
            )
        raise MaintenanceError(
            f"table {path}: the compaction met conflicting commits {MAX_ATTEMPTS} times; "
            "nothing was committed, run again",
            path=path,
        )
    finally:
        release_lease(path, storage_options, by, until_ms)


def vacuum_table(
    path: str,
    storage_options: dict[str, str] | None,
    by: str,
    retention_hours: int | None = None,
    *,
    members_stopped: bool = False,
) -> VacuumResult:
    """Delete the data files the table at ``path`` no longer references, removed (or, for
    files no commit names, written) longer than ``retention_hours`` ago: Delta's VACUUM in
    full mode (:func:`spark_groups.storage.maintenance_steps.vacuum`; docs/cli.md, "vacuum").

    The retention (None: the table's ``delta.deletedFileRetentionDuration``, Delta's 7 days
    by default) is never below that property, which readers of older snapshots, time travel
    and streaming readers of the table rely on, nor, unless ``members_stopped``, below
    :data:`MIN_RETAIN_HOURS_BESIDE_MEMBERS`: a running member's data files are referenced
    by no commit until its batch commits. :class:`OptionError` names ``--retain-hours``."""
    table = _open(path, storage_options)
    floor = deleted_file_retention_hours(table)
    if retention_hours is None:  # the table's, but beside members never below the minimum
        used = floor if members_stopped else max(floor, MIN_RETAIN_HOURS_BESIDE_MEMBERS)
    else:
        used = float(retention_hours)
    if used < floor:
        raise OptionError(
            "--retain-hours",
            f"{retention_hours} is below the table's delta.deletedFileRetentionDuration "
            f"({floor:g} hours), which readers of older versions of {path} rely on; give at "
            "least that, or lower the table property first if no reader needs it",
        )
    if used < MIN_RETAIN_HOURS_BESIDE_MEMBERS and not members_stopped:
        raise OptionError(
            "--retain-hours",
            f"{used:g} hours would delete the data files running members have written but "
            f"not yet committed; give at least {MIN_RETAIN_HOURS_BESIDE_MEMBERS} hour(s), or "
            "stop every member of the table first and add --members-stopped",
        )
    try:
        deleted = vacuum(
            table, None if used == floor else math.ceil(used),
            {"spark_groups.member": by}, full=True,
        )  # fmt: skip
    except Exception as exc:
        raise MaintenanceError(
            f"table {path}: vacuum failed ({type(exc).__name__}: {exc}); files it deleted were "
            "removed from the table long enough ago, run again to finish",
            path=path,
        ) from exc
    table = _open(path, storage_options)
    return VacuumResult(deleted=list(deleted), retention_hours=used, version=table.version())
