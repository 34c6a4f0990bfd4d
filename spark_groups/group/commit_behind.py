"""The safe point's commit, one batch behind Spark's thread.

``latestOffset(start)`` tells the source that every batch up to ``start`` is in Spark's
commit log: that batch may now be committed to Kafka and the ledger (``group.commit``). The
commit takes tens of milliseconds (an OffsetCommit round trip, a Delta append, with
``sink.table`` a read of the sink's table), and the next batch need not wait for it: its plan
reads the partitions' positions, which the commit does not change. So
:meth:`CommitBehind.submit` runs it on a thread of its own and returns at once, and Spark's
thread goes on to plan, log and run the next batch while it lands.

What stays as it was (docs/guarantees.md):

* **Order.** One commit in flight at a time, in batch order: :meth:`~CommitBehind.submit`
  first waits for the commit before it. Within one commit the order is unchanged (Kafka, then
  the ledger), and it holds the committer's lock as Spark's thread held it.
* **The barrier.** A revocation waits for its partitions' last batch to be committed, as
  before; it serves this thread's Kafka commit like any other caller's, and commits in its
  place when the revocation arrived inside that commit (``group.commit_lock``).
* **Failures.** A commit that fails (the ledger cannot be written, the sink's table does not
  hold a finished batch) fails the query at Spark's next call into the source, the next
  ``latestOffset`` or ``commit``: one batch later than on Spark's thread, and that batch is
  not committed either.
* **Leaving.** ``GroupStream.stop`` waits for the commit in flight before it releases claims
  and commits what Spark finished (:meth:`~CommitBehind.wait`).

A crash while the commit is in flight is a crash between Spark's commit log and the Kafka
commit, the window the crash point ``spark.commit_log`` names: the next owner resumes from
the ledger, Kafka's commit or the sink's table, whichever is furthest.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spark_groups.offsets import BatchOffset

log = logging.getLogger(__name__)


class CommitBehind:
    """Runs ``commit(batch)`` for finished batches on a thread of their own, one at a time
    and in order (see the module doc)."""

    def __init__(self, commit: Callable[[BatchOffset], None]) -> None:
        self._commit = commit
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._submitted = -1  # the highest batch handed to a thread

    def submit(self, batch: BatchOffset) -> None:
        """Start committing ``batch`` and return; a batch submitted already is left alone.
        Waits for the commit before it first, and raises its error here."""
        if batch.batch <= self._submitted:
            return
        self.wait()
        self._submitted = batch.batch
        self._thread = threading.Thread(
            target=self._run, args=(batch,), name=f"spark-groups-commit-{batch.batch}", daemon=True
        )
        self._thread.start()

    def wait(self) -> None:
        """Wait for the commit in flight; raise its error (once)."""
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
            log.warning("the commit of batch %d failed: %s", self._submitted, exc)

    def _run(self, batch: BatchOffset) -> None:
        try:
            self._commit(batch)
        except BaseException as exc:  # raised on Spark's thread, at its next call
            self._error = exc
