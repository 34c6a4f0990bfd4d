"""Keeping the offsets ledger small: compaction, vacuum, checkpoints and log clean-up.

A ledger appended once per micro-batch gathers one tiny Parquet file and one
log entry per commit, and every commit and read gets slower. The append whose commit *is*
table version ``n * compact_every`` (the count comes from the table itself, so it survives
restarts and is shared by all writers of the table) calls :func:`maintain`, right after its
commit and before returning. It:

1. compacts small files (``optimize.compact`` with a bounded :data:`COMPACT_TARGET_SIZE`, so
   one compaction never rewrites more than about that many bytes once the table is large);
2. vacuums in *full* mode (Delta's own VACUUM): every file the current version does not
   reference and that was removed (or, for a file no commit names, written) longer ago than
   ``delta.deletedFileRetentionDuration`` is deleted. Not *lite* mode: a checkpoint drops
   tombstones older than the retention, and with a slow trigger 200 commits take longer
   than that, so lite mode would never see those files again and they would stay forever.
   Full mode is safe beside the other writers of a ledger: an append writes its file and
   commits it in the same call, milliseconds apart, far inside the retention. The table is
   created with a retention of :data:`DELETED_FILE_RETENTION`
   (1 hour): a reader (a CLI, a notebook, another ledger) that reads the files within an
   hour of loading its snapshot finds every one of them, even if the snapshot's files were
   compacted away meanwhile; and the directory does not keep a week of tiny files, as
   Delta's default of 7 days would. Time travel further back than that is not
   needed: the ledger's history lives in its rows, not in old table versions;
3. writes a checkpoint of the compacted state, so that opening the table reads one small
   Parquet checkpoint instead of replaying thousands of JSON commits;
4. deletes log entries older than ``delta.logRetentionDuration`` (:data:`LOG_RETENTION`,
   2 minutes) that lie before a checkpoint (Delta's own rule, so every kept version stays
   loadable). delta-rs lists the log on every commit, so its length is paid by every
   append: after 10,000 commits in a few minutes an append's p50 was 38 ms with an hour of
   log and 26 ms with two minutes of it (docs/benchmarks.md, issue 34's notes). Nothing
   reads a ledger's old versions: its history lives in its rows. A writer whose snapshot is
   older than ``REFRESH_AFTER_S`` (:mod:`spark_groups.ledger.append`, 60 s, half the
   retention) refreshes it before appending, and a reader whose snapshot's next entries are
   gone loads the table afresh (:meth:`~spark_groups.ledger.store.LedgerStore.load`).

The steps are shared with the sink table's maintenance
(:mod:`spark_groups.storage.maintenance_steps`).
Exactly one append holds a given version, so exactly one writer maintains per period. This
matters: delta-rs 1.6.6 does **not** detect two concurrent ``optimize.compact`` runs (both
commit, each re-adding the same rows: duplicated data; ``app_transactions`` passed to
``compact`` are not even recorded). Deciding by "my commit crossed a multiple since the
version I last saw" instead elected several writers at once in the tests and duplicated rows.
Within one process, a lock per table path also keeps ledger objects from compacting at the
same time (a writer finding it taken skips its turn). Across processes, two compactions can
still overlap only if ``compact_every`` commits land while one runs (it takes tens to a few
hundred milliseconds), so keep ``compact_every`` large (default 200) when several processes
write one table. Duplicated rows would not change ``OffsetLedger.latest_positions`` or
``OffsetLedger.last_batch`` (maxima since a marker), only ``OffsetLedger.history``. If a
maintenance commit happens to hold the multiple, that period is skipped and the next one
compacts twice as many files.

Maintenance failures are logged as warnings and do not fail the append (its rows are
already committed; raising would invite the caller to append them twice). Because the
retention settings are table properties, Spark's Delta ``VACUUM`` and other delta-rs
writers respect them too. Appends keep delta-rs' own checkpoint every
``delta.checkpointInterval`` commits, also when ``compact_every`` is 0, but turn off
its expired-log cleanup after every commit: that hook lists the whole log each time (about
10 ms per commit with a thousand log entries, and growing); step 4 does the same job once
per period. So with ``compact_every=0`` nothing is ever deleted.

The ledger's ``delta.checkpointInterval`` is :data:`CHECKPOINT_INTERVAL` (10), not Delta's
100: delta-rs reads the JSON commits since the last checkpoint concurrently, one blocking
thread each, and keeps those threads alive between commits. At 100 the driver's reader
process held ~100 such threads and ~25 MB more memory than at 10 (measured with deltalake
1.6.6); a checkpoint of a compacted ledger is one small Parquet file.

Ledgers created by earlier versions get these settings at their next maintenance
(:data:`UPGRADED_PROPERTIES`: a property still at the value earlier versions gave it, or
unset, is changed; one an operator set to anything else is left alone).
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
#: Commits between two checkpoints of the ledger (Delta's default is 100; see the module doc).
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
