"""Compaction of the sink's table between batches (the sink option ``compactEvery``).

With ``compactEvery=N`` the batch whose commit is table version ``n * N`` compacts the table
right after its commit, on the driver, with :func:`spark_groups.sink.live_maintenance.optimize`
(under the maintenance lease, every transaction id kept). One commit holds a version, so one
member per period compacts; a member finding the lease taken skips its turn. The batch is
committed already, so a failed compaction is logged and never fails the batch.
"""

from __future__ import annotations

import logging
import time

from spark_groups.errors import MaintenanceRunningError
from spark_groups.options.sink import SinkOptions

log = logging.getLogger(__name__)


def compact_if_due(options: SinkOptions, path: str, version: int | None) -> bool:
    """Compact the table at ``path`` (written with ``options``) when its new ``version`` is a
    multiple of ``options.compact_every``; return True when a compaction ran and committed."""
    every = options.compact_every
    if not every or version is None or version == 0 or version % every:
        return False
    from spark_groups.sink.live_maintenance import optimize

    started = time.monotonic()
    try:
        result = optimize(path, options.storage_options, f"sink:{options.member}")
    except MaintenanceRunningError as exc:
        log.info("sink %s: compaction at version %d skipped: %s", path, version, exc)
        return False
    except Exception as exc:  # the batch is committed; the next period tries again
        log.warning(
            "sink %s: compaction at version %d failed (the batch is committed): %s: %s",
            path,
            version,
            type(exc).__name__,
            exc,
        )
        return False
    log.info(
        "sink %s: compacted at version %d in %.1f s: %d file(s) -> %d",
        path,
        version,
        time.monotonic() - started,
        result.before.files,
        result.after.files,
    )
    return True
