"""Upkeep of the sink's table beside its batches: checkpoints, log clean-up, compaction, vacuum.

The sink's commits (kafka-group batches, claims, leases, accepted gaps; not kafka-share's) run
none of delta-rs' post-commit hooks (:func:`batch_commit_hooks`): delta-rs would otherwise list
the whole ``_delta_log`` after every commit to clean up expired entries, and write a checkpoint
inside every hundredth, so a batch would wait for both. After each commit the sink hands the
new version to the table's :class:`TableUpkeep` (one per table and process); its
thread works the latest version it was given, one run at a time, and never fails a batch
(errors are logged, the next version tries again):

1. **Compaction**, when a version the sink committed since the last run is a multiple of
   ``compactEvery``: ``spark-groups optimize``'s (the maintenance lease, compaction with every
   transaction id kept, a checkpoint, the log cleaned up); a lease held elsewhere skips the turn.
   One commit holds a version, so one member per period compacts.
2. **Vacuum** in lite mode after a compaction, and after every checkpoint the upkeep writes:
   the data files the table's tombstones name, removed longer ago than
   ``delta.deletedFileRetentionDuration`` (a member's uncommitted files are in no tombstone, so
   this is safe beside members). It reads the tombstones of the snapshot loaded *before* the
   checkpoint: a checkpoint drops the tombstones that expired, so a snapshot loaded after it
   would never find their files again.
3. Otherwise a **checkpoint** and the log cleaned up, when the version is a multiple of the
   table's ``delta.checkpointInterval`` (or, halfway to the next, the newest checkpoint is
   twice that old: a claim, a lease or a process that stopped may have held the multiple).
   Any other version costs nothing: no read, no write.

A table the sink creates gets :data:`TABLE_DEFAULTS`; a table that exists keeps its own
properties, and the first run in a process logs once what they cost at the table's commit
rate (:func:`property_costs`). docs/operations.md, "What grows, and what keeps it small".
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_groups.errors import MaintenanceRunningError
from spark_groups.storage.delta import open_table
from spark_groups.storage.files import location, table_uri
from spark_groups.storage.maintenance_steps import (
    DEFAULT_DELETED_FILE_RETENTION_HOURS,
    checkpoint_and_clean_log,
    duration_hours,
    vacuum,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

#: Table properties of a table the sink creates: its log and its removed files kept 15
#: minutes (time travel reaches that far back), a checkpoint every 100 commits (Delta's
#: default, made explicit). Why these: docs/operations.md and ``python -m bench long-run``.
TABLE_DEFAULTS: dict[str, str] = {
    "delta.logRetentionDuration": "interval 15 minutes",
    "delta.deletedFileRetentionDuration": "interval 15 minutes",
    "delta.checkpointInterval": "100",
}
#: Delta's own values of those properties, for a table that does not set them.
DELTA_DEFAULTS: dict[str, str] = {
    "delta.logRetentionDuration": "interval 30 days",
    "delta.deletedFileRetentionDuration": "interval 1 weeks",
    "delta.checkpointInterval": "100",
}
#: The sink option ``compactEvery``'s default: compact after every 100 table versions.
DEFAULT_COMPACT_EVERY = 100
#: How long an idle upkeep thread waits for the next version before it ends.
IDLE_SECONDS = 60.0
#: How long the upkeep's compaction holds the maintenance lease: longer than compacting a
#: table kept small takes, short enough that a member killed in a compaction (its process
#: gone with the thread) holds the others' compactions back only that long.
LEASE_SECONDS = 600.0
#: How many recent commits :func:`property_costs` reads to tell the commit rate.
RATE_COMMITS = 100


def batch_commit_hooks() -> Any:
    """delta-rs' post-commit hooks for a batch's commit: none (the upkeep does them)."""
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def checkpoint_interval(table: DeltaTable) -> int:
    """The table's ``delta.checkpointInterval`` (Delta's 100 when unset or not a number)."""
    raw = table.metadata().configuration.get("delta.checkpointInterval", "100")
    return int(raw) if raw.strip().isdigit() and int(raw) > 0 else 100


def property_costs(table: DeltaTable) -> list[str]:
    """What the table's retention properties keep, at its commit rate of its last
    :data:`RATE_COMMITS` commits, where they differ from :data:`TABLE_DEFAULTS` (empty: the
    table has the defaults, or too few commits to tell a rate)."""
    config = table.metadata().configuration
    differing = {
        key: config.get(key, DELTA_DEFAULTS[key])
        for key, wanted in TABLE_DEFAULTS.items()
        if config.get(key, DELTA_DEFAULTS[key]) != wanted and key != "delta.checkpointInterval"
    }
    if not differing:
        return []
    stamps = [c["timestamp"] for c in table.history(RATE_COMMITS) if "timestamp" in c]
    if len(stamps) < 2 or max(stamps) <= min(stamps):
        return []
    rate = (len(stamps) - 1) / ((max(stamps) - min(stamps)) / 1000)
    costs = []
    log_value = differing.get("delta.logRetentionDuration")
    if log_value is not None:
        hours = duration_hours(log_value, 30 * 24.0)
        costs.append(
            f"delta.logRetentionDuration is {log_value!r}: at {rate:.2f} commits a second "
            f"that keeps about {int(rate * hours * 3600):,} commit files in _delta_log, which "
            "delta-rs lists on every commit on a local disk or a mount"
        )
    files_value = differing.get("delta.deletedFileRetentionDuration")
    if files_value is not None:
        hours = duration_hours(files_value, DEFAULT_DELETED_FILE_RETENTION_HOURS)
        costs.append(
            f"delta.deletedFileRetentionDuration is {files_value!r}: every file a compaction "
            f"removes stays in each checkpoint for {hours:g} hours (about "
            f"{int(rate * hours * 3600):,} commits' files at this rate), which every reader loads"
        )
    return costs


class TableUpkeep:
    """The upkeep of the sink table at ``path`` in this process (see the module doc).

    :meth:`after_commit` never blocks on the work: it records the version and wakes the
    thread. At most one run at a time; ``compact_every`` 0 never compacts."""

    def __init__(
        self,
        path: str,
        storage_options: Mapping[str, str] | None,
        member: str,
        compact_every: int = DEFAULT_COMPACT_EVERY,
    ) -> None:
        """Describe the upkeep; nothing runs until :meth:`after_commit`."""
        self.path = path
        self.uri = table_uri(path)
        self.storage_options = dict(storage_options) if storage_options else None
        self.member = member
        self.compact_every = compact_every
        self._cond = threading.Condition()
        self._pending: int | None = None
        self._compact_due = False
        self._working = False
        self._thread: threading.Thread | None = None
        self._costs_told = False
        self._interval = 100  # the table's delta.checkpointInterval, as last read
        #: How many runs did each step, for tests and benchmarks.
        self.counts = {"compactions": 0, "checkpoints": 0, "vacuums": 0, "failures": 0}

    def __repr__(self) -> str:
        return f"TableUpkeep(path={self.path!r})"

    def after_commit(self, version: int | None) -> None:
        """Note that the sink committed ``version`` (None: nothing committed); returns at once."""
        if version is None or version <= 0:
            return
        with self._cond:
            self._pending = max(version, self._pending or 0)
            if self.compact_every and version % self.compact_every == 0:
                self._compact_due = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name=f"spark_groups-upkeep-{self.path}", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def busy(self) -> bool:
        """Whether a run is pending or running now."""
        with self._cond:
            return self._pending is not None or self._working

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or running (tests, benchmarks, a clean stop)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending is not None or self._working:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._pending is None and not self._cond.wait_for(
                    lambda: self._pending is not None, IDLE_SECONDS
                ):
                    self._thread = None
                    return
                version, compact = self._pending, self._compact_due
                self._pending, self._compact_due, self._working = None, False, True
            try:
                assert version is not None
                self._run(version, compact)
            except Exception as exc:  # never let the thread die on a bad run
                self.counts["failures"] += 1
                log.warning(
                    "sink %s: upkeep after version %s failed (the batch is committed): %s: %s",
                    self.path,
                    version,
                    type(exc).__name__,
                    exc,
                )
            finally:
                with self._cond:
                    self._working = False
                    self._cond.notify_all()

    def _run(self, version: int, compact: bool) -> None:
        if not self._costs_told:
            self._costs_told = True
            table = self._open()
            if table is not None:
                self._interval = checkpoint_interval(table)
            for cost in property_costs(table) if table is not None else []:
                log.warning(
                    "sink %s: %s; a table the sink creates has %s (docs/operations.md)",
                    self.path,
                    cost,
                    ", ".join(f"{k}={v!r}" for k, v in TABLE_DEFAULTS.items()),
                )
        if compact and self._compact(version):
            return
        if not self._checkpoint_due(version):
            return  # most versions: nothing read, nothing written
        table = self._open()
        if table is None:
            return
        self._interval = checkpoint_interval(table)
        started = time.monotonic()
        checkpoint_and_clean_log(table)
        self.counts["checkpoints"] += 1
        self._vacuum(table)  # its tombstones are those from before the checkpoint
        log.debug(
            "sink %s: checkpoint at version %d and log clean-up in %.0f ms",
            self.path,
            table.version(),
            (time.monotonic() - started) * 1000,
        )

    def _compact(self, version: int) -> bool:
        from spark_groups.sink.live_maintenance import optimize

        before = self._open()  # the tombstones the compaction's checkpoint will drop
        started = time.monotonic()
        try:
            result = optimize(
                self.path,
                self.storage_options,
                f"sink:{self.member}",
                lease_seconds=LEASE_SECONDS,
            )
        except MaintenanceRunningError as exc:
            log.info("sink %s: compaction at version %d skipped: %s", self.path, version, exc)
            return False
        self.counts["compactions"] += 1
        self.counts["checkpoints"] += 1
        log.info(
            "sink %s: compacted at version %d in %.1f s: %d file(s) -> %d",
            self.path,
            version,
            time.monotonic() - started,
            result.before.files,
            result.after.files,
        )
        if before is not None:
            self._vacuum(before)
        return True

    def _vacuum(self, table: DeltaTable) -> None:
        """Lite vacuum on ``table``, a snapshot loaded before the newest checkpoint."""
        deleted = vacuum(table, commit_info={"spark_groups.member": f"sink:{self.member}"})
        self.counts["vacuums"] += 1
        if deleted:
            log.info("sink %s: vacuumed %d removed file(s)", self.path, len(deleted))

    def _checkpoint_due(self, version: int) -> bool:
        """At a multiple of the checkpoint interval; halfway between two, when the newest
        checkpoint is twice the interval old (one read of ``_last_checkpoint``)."""
        interval = self._interval
        if version % interval == 0:
            return True
        if version % interval != interval // 2:
            return False
        return version - self._last_checkpoint() >= 2 * interval

    def _last_checkpoint(self) -> int:
        """The version of the table's newest checkpoint (-1: none)."""
        where = location(self.uri, self.storage_options)
        try:
            text = where.read_text(where.child("_delta_log/_last_checkpoint"))
        except (FileNotFoundError, OSError):
            return -1
        return int(json.loads(text).get("version", -1))

    def _open(self) -> DeltaTable | None:
        return open_table(self.uri, self.storage_options)


_UPKEEPS: dict[tuple[str, str], TableUpkeep] = {}
_UPKEEPS_GUARD = threading.Lock()


def upkeep_for(
    path: str, storage_options: Mapping[str, str] | None, member: str, compact_every: int
) -> TableUpkeep:
    """The process's :class:`TableUpkeep` of the table at ``path`` (made at the first call)."""
    key = (table_uri(path), json.dumps(dict(storage_options or {}), sort_keys=True))
    with _UPKEEPS_GUARD:
        upkeep = _UPKEEPS.get(key)
        if upkeep is None:
            upkeep = _UPKEEPS[key] = TableUpkeep(path, storage_options, member, compact_every)
        upkeep.compact_every = compact_every
        return upkeep
