"""The ledger's append of a batch, behind the thread that committed it to Kafka.

At the safe point a finished batch is committed to Kafka, then to the ledger
(``group.committer``). Once Kafka holds the batch a plain consumer that takes the partitions
over starts past it, and a partition resumes from the furthest of the ledger and Kafka, so
nothing waits for the ledger's Delta commit: :meth:`LedgerBehind.append` runs it on a thread
of its own, one in flight at a time and in order, and Spark's thread goes on to plan the
next batch. A crash before it lands is a crash at the point ``kafka.committed``. An append
that fails raises at the next append, or is logged when the member leaves
(:meth:`LedgerBehind.wait_quietly`, which ``GroupStream.stop`` calls before it leaves).
"""

from __future__ import annotations

import logging
import threading

from spark_groups import crash_points
from spark_groups.ledger import LedgerRow, OffsetLedger

log = logging.getLogger(__name__)


class LedgerBehind:
    """Appends batches' ledger rows to ``ledger`` on a thread of their own, one at a time
    and in order (see the module doc)."""

    def __init__(self, ledger: OffsetLedger) -> None:
        self.ledger = ledger
        # Spark's thread appends; a stop (maybe SIGTERM's thread) waits: one at a time.
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._batch = -1  # the batch of the append in flight (or the last one)

    def append(self, rows: list[LedgerRow], batch: int) -> None:
        """Start appending ``rows`` (of ``batch``) and return; the append before lands first,
        and its error is raised here."""
        with self._lock:
            self.wait()
            self._batch = batch
            self._thread = threading.Thread(
                target=self._run, args=(rows,), name=f"spark-groups-ledger-{batch}", daemon=True
            )
            self._thread.start()

    def wait(self) -> None:
        """Wait for the append in flight; raise its error (once)."""
        with self._lock:
            thread = self._thread
            if thread is not None:
                thread.join()
                self._thread = None
            error, self._error = self._error, None
        if error is not None:
            raise error

    def wait_quietly(self) -> None:
        """:meth:`wait`, logging an error instead of raising it (the member is leaving)."""
        try:
            self.wait()
        except Exception as exc:
            log.warning("the ledger append of batch %d failed: %s", self._batch, exc)

    def _run(self, rows: list[LedgerRow]) -> None:
        try:
            self.ledger.append(rows)
            crash_points.reached("ledger.written")
        except BaseException as exc:  # raised on Spark's thread, at the next append
            self._error = exc
