"""The releases of this member's claims on their way to Kafka (``group.claims`` step 2).

A release runs on the thread that stops the member (Spark's, or the one SIGTERM starts); its
last step commits the sink table's positions to Kafka through the member's owner thread.
That commit first handles the rebalance events librdkafka has queued, so a revocation of the
very partitions being released can run *inside* it, on the owner thread, while the releasing
thread waits for that thread. After the revocation the partitions are no longer owned and
the release's commit leaves them out; the revocation's barrier, meanwhile, waits for a batch
that the release made uncommittable. Neither would commit the positions, and the next owner
would read the released batch again (found by the crash matrix: SIGTERM at ``planned`` while
a plain consumer joined).

So the barrier asks this object. Each released partition is *in flight* from step 2a (its
claim is released) until the release's commit has returned; from step 2b on, the positions
the table's snapshot holds are known here:

1. ``begin`` (2a): the partitions are in flight, positions unknown;
2. ``landed`` (2b): the positions to commit are known; a partition the table holds nothing
   new of leaves the flight (there is nothing to commit);
3. ``take`` (the barrier, on the owner thread, inside the release's commit): it commits the
   positions itself, while the partitions are still owned, and they leave the flight;
4. ``end`` (after 2c, however it went): the rest leave the flight.

A revoked partition in flight is not given up until its release took one of those exits.
Thread-safe: the releasing thread writes, the owner thread reads and takes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from spark_groups.offsets import TopicPartition


class ReleasesInFlight:
    """The partitions whose release has begun and not yet ended (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._positions: dict[TopicPartition, int | None] = {}

    def begin(self, partitions: Iterable[TopicPartition]) -> None:
        """Step 1: ``partitions`` are being released; their positions are not known yet."""
        with self._lock:
            for tp in partitions:
                self._positions[tp] = None

    def landed(
        self, partitions: Iterable[TopicPartition], positions: Mapping[TopicPartition, int]
    ) -> None:
        """Step 2: the release of ``partitions`` landed; ``positions`` are what it commits
        (those without one leave the flight: nothing of them is committed)."""
        with self._lock:
            for tp in partitions:
                if tp not in self._positions:
                    continue
                if tp in positions:
                    self._positions[tp] = positions[tp]
                else:
                    del self._positions[tp]

    def take(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Step 3: the known positions of those of ``partitions`` in flight, which leave the
        flight (the caller commits them in the release's place)."""
        taken: dict[TopicPartition, int] = {}
        with self._lock:
            for tp in partitions:
                offset = self._positions.get(tp)
                if offset is not None:
                    taken[tp] = offset
                    del self._positions[tp]
        return taken

    def end(self, partitions: Iterable[TopicPartition]) -> None:
        """Step 4: the release of ``partitions`` is over."""
        with self._lock:
            for tp in partitions:
                self._positions.pop(tp, None)

    def pending(self, partitions: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
        """Those of ``partitions`` still in flight."""
        with self._lock:
            return frozenset(tp for tp in partitions if tp in self._positions)
