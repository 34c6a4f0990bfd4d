"""One append to the ledger table: one Delta commit, retried on concurrent commits.

Appends never conflict logically: delta-rs rebases a commit onto newer versions itself; when
it still gives up (``CommitFailedError``) the whole append is retried with jittered back-off,
up to :data:`MAX_COMMIT_ATTEMPTS` times. A failed commit writes nothing to the log, so a retry
never duplicates rows.
"""

from __future__ import annotations

import logging
import random
import time

import pyarrow as pa

from spark_groups.ledger.store import GROUP_ID_KEY, LedgerStore
from spark_groups.storage.commit_lock import commits_of

# The ledger logs under the logger it has always used (spark_groups.ledger.table).
logger = logging.getLogger("spark_groups.ledger.table")

#: How many times :func:`commit` tries a commit that delta-rs gave up on.
MAX_COMMIT_ATTEMPTS = 8
#: An append refreshes its table snapshot first when it is older than this. Fresher
#: snapshots are written on as they are (delta-rs rebases the commit); one older than the
#: log retention (``self_maintenance.LOG_RETENTION``) could not be: the commits after it are
#: deleted and delta-rs fails with "Invalid table version". Half the retention leaves room
#: for clocks that disagree between the machines writing one ledger.
REFRESH_AFTER_S = 60.0


def commit(store: LedgerStore, data: pa.Table) -> int:
    """Append ``data`` (rows of :data:`~spark_groups.ledger.rows.LEDGER_SCHEMA`) to ``store``'s
    table in one commit, creating the table on first use; return the table version of that
    commit. The caller holds ``store.lock``. Raises :class:`~spark_groups.errors.LedgerError`
    when the commit fails (after :data:`MAX_COMMIT_ATTEMPTS` tries on concurrent commits)."""
    from deltalake import CommitProperties, PostCommitHookProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError

    batches = sorted(set(data.column("batch").to_pylist()))
    properties = CommitProperties(
        custom_metadata={GROUP_ID_KEY: store.group_id, "spark_groups.batches": str(batches)}
    )
    # delta-rs' own checkpoint every delta.checkpointInterval commits is kept; its
    # expired-log cleanup is not: it lists the whole log on *every* commit, and the
    # maintenance does it every compact_every.
    hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        # No refresh before writing: a stale snapshot is fine for a blind append (delta-rs
        # rebases it onto newer versions), and a refresh would cost every commit.
        stale = time.monotonic() - store.fresh_at > REFRESH_AFTER_S
        table = store.table if store.table is not None and not stale else store.load()
        if table is None:
            table = store.create()
        try:
            with commits_of(table):
                write_deltalake(
                    table,
                    data,
                    mode="append",
                    # A ledger written before log_end existed gets the column now.
                    schema_mode=None if store.has_log_end else "merge",
                    commit_properties=properties,
                    post_commithook_properties=hooks,
                )
        except CommitFailedError as exc:
            store.table = None  # reload from storage before the next attempt
            if attempt == MAX_COMMIT_ATTEMPTS:
                raise store.error(
                    f"{store.name}: commit of batch(es) {batches} failed "
                    f"{attempt} times on concurrent commits: {exc}"
                ) from exc
            delay = random.uniform(0.0, min(0.5, 0.01 * 2**attempt))
            logger.warning(
                "ledger %s: commit of batch(es) %s failed on concurrent commits "
                "(attempt %d of %d); retrying in %.0f ms: %s",
                store.path,
                batches,
                attempt,
                MAX_COMMIT_ATTEMPTS,
                delay * 1000,
                exc,
            )
            time.sleep(delay)
        except Exception as exc:
            store.table = None
            raise store.error(
                f"{store.name}: appending batch(es) {batches} failed: {type(exc).__name__}: {exc}"
            ) from exc
        else:
            store.fresh_at = time.monotonic()  # the snapshot is the commit's version
            return table.version()
    raise AssertionError("unreachable")  # pragma: no cover
