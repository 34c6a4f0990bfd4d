"""One commit at a time, and which thread is committing.

:class:`CommitLock` is :attr:`BatchCommitter.lock <spark_groups.group.commit.BatchCommitter.lock>`:
the safe point (Spark's thread), the revocation barrier (the member's owner thread) and
leaving hold it while they commit. It knows its holder for one case. Spark's thread holds it
while it waits for the owner thread to run its Kafka commit, and that commit first polls for
the rebalance events librdkafka has queued (``GroupMember.commit`` with ``owned_only``). A
revocation delivered by that poll runs its barrier *inside* the holder's request: the holder
cannot release the lock before the barrier returns, so the barrier must not wait for it. It
commits in the holder's place instead (:meth:`CommitLock.held_by`), while the holder is
stopped in its request; the holder then finds those ranges committed and goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Collection


class CommitLock:
    """A non-reentrant lock that knows the thread holding it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock (wait for it unless ``blocking`` is False); True when taken."""
        taken = self._lock.acquire(blocking)
        if taken:
            self._holder = threading.get_ident()
        return taken

    def release(self) -> None:
        """Give the lock back (its holder only)."""
        self._holder = None
        self._lock.release()

    def __enter__(self) -> CommitLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def held_by(self, threads: Collection[int]) -> bool:
        """True when one of ``threads`` (``threading.get_ident()`` values) holds the lock."""
        holder = self._holder
        return holder is not None and holder in threads
