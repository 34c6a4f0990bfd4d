"""Keeping the offsets ledger small: compaction, vacuum, checkpoints and log clean-up.

The append whose commit *is* table version ``n * compact_every`` calls :func:`maintain` right
after its commit: it compacts small files (at most about :data:`COMPACT_TARGET_SIZE` rewritten
at once), vacuums in full mode past :data:`DELETED_FILE_RETENTION`, writes a checkpoint, and
deletes log entries older than :data:`LOG_RETENTION` that lie before a checkpoint (the steps
are :mod:`spark_groups.storage.maintenance_steps`, shared with the sink's table). Exactly one
append holds a version, so one writer maintains per period; a lock per table path keeps two
ledger objects of one process from compacting at once (two concurrent compactions would
duplicate rows). Tables of earlier versions get :data:`UPGRADED_PROPERTIES` at their next
maintenance (a value an operator set is left alone). The settings and why:
docs/offsets.md, "Maintenance".
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from spark_groups.storage.files import local_path
from spark_groups.storage.maintenance_steps import checkpoint_and_clean_log, compact, vacuum

if TYPE_CHECKING:
    from deltalake import DeltaTable

# Logs under the logger it has always used (before the module's rename).
logger = logging.getLogger("spark_groups.ledger.maintenance")

#: How long files removed by compaction are kept before vacuum may delete them.
DELETED_FILE_RETENTION = "interval 1 hours"
#: How long Delta log entries are kept (only those before a checkpoint are ever deleted);
#: twice ``spark_groups.ledger.append.REFRESH_AFTER_S``.
LOG_RETENTION = "interval 2 minutes"
#: Commits between two checkpoints of the ledger (Delta's default is 100: docs/offsets.md).
CHECKPOINT_INTERVAL = "10"
CHECKPOINT_INTERVAL_KEY = "delta.checkpointInterval"
#: Table properties a maintenance brings up to date: key -> (the values earlier versions of
#: spark_groups left, None for unset; the value now).
UPGRADED_PROPERTIES: dict[str, tuple[tuple[str | None, ...], str]] = {
    CHECKPOINT_INTERVAL_KEY: ((None,), CHECKPOINT_INTERVAL),
    "delta.logRetentionDuration": (("interval 1 days", "interval 1 hours"), LOG_RETENTION),
}
#: Target size of compacted files; files this large are not rewritten again.
COMPACT_TARGET_SIZE = 16 * 1024 * 1024


def maintain(table: DeltaTable, path: str, commit_info: dict[str, str]) -> bool:
    """Compact, vacuum, checkpoint and clean up the log of the ledger ``table`` at ``path``;
    the compaction's commit carries ``commit_info``.

    Never raises: a failure is logged as a warning and returns False (the caller should load
    the table afresh). Returns True when done, or skipped because another ledger object of this
    process is maintaining the same table right now (a second, overlapping compaction would
    duplicate rows).
    """
    lock = _maintenance_lock(path)
    if not lock.acquire(blocking=False):
        logger.info("ledger %s: maintenance already running in this process", path)
        return True
    try:
        return _maintain_locked(table, path, commit_info)
    finally:
        lock.release()


def _maintain_locked(table: DeltaTable, path: str, commit_info: dict[str, str]) -> bool:
    started = time.perf_counter()
    step = "reading the table properties"
    try:
        config = table.metadata().configuration
        upgrades = {
            key: new for key, (old, new) in UPGRADED_PROPERTIES.items() if config.get(key) in old
        }
        if upgrades:
            step = f"setting {', '.join(sorted(upgrades))}"
            table.alter.set_table_properties(upgrades)
        step = "compacting"
        metrics = compact(table, commit_info, COMPACT_TARGET_SIZE)
        step = "vacuuming"
        vacuumed = vacuum(table, full=True)
        step = "checkpointing and cleaning up the log"
        checkpoint_and_clean_log(table)
    except Exception as exc:
        logger.warning(
            "ledger %s: maintenance failed while %s (the append itself succeeded): %s: %s",
            path,
            step,
            type(exc).__name__,
            exc,
        )
        return False
    logger.info(
        "ledger %s: maintenance at version %d in %.0f ms: %s file(s) compacted into %s, "
        "%d old file(s) vacuumed, checkpoint written",
        path,
        table.version(),
        (time.perf_counter() - started) * 1000,
        metrics.get("numFilesRemoved"),
        metrics.get("numFilesAdded"),
        len(vacuumed),
    )
    return True


_MAINTENANCE_LOCKS: dict[str, threading.Lock] = {}
_MAINTENANCE_LOCKS_GUARD = threading.Lock()


def _maintenance_lock(path: str) -> threading.Lock:
    """The process-wide lock that serialises maintenance of the table at ``path``."""
    local = local_path(path)
    key = str(local.resolve()) if local is not None else path.rstrip("/")
    with _MAINTENANCE_LOCKS_GUARD:
        return _MAINTENANCE_LOCKS.setdefault(key, threading.Lock())
