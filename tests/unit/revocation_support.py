"""A revocation delivered inside another thread's request to the member's owner thread.

A request that commits (``GroupMember.commit`` with ``owned_only``) first polls for queued
rebalance events on the owner thread, so a revocation can run *inside* it while the thread
that asked waits for the owner thread. :class:`RevocationInsideRequest` makes that happen
every time: the owner thread's own polls are held back, and the next ownership check polls
until the revocation queued meanwhile is delivered there.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from spark_groups.group.stream import GroupStream
from spark_groups.offsets import TopicPartition


class RevocationInsideRequest:
    """Within the block, the next revocation of ``stream``'s member is delivered by the
    ownership check of the next commit request (start the block before the member that
    causes the rebalance joins). :attr:`inside` holds, per revocation, the threads whose
    requests it ran inside."""

    def __init__(self, stream: GroupStream) -> None:
        self.stream = stream
        self.member = stream.ensure_started()
        self.inside: list[frozenset[int]] = []
        self._hold = threading.Event()
        callbacks = self.member._callbacks
        self._real_poll, self._real_owned = callbacks.poll, callbacks.owned_now
        self._real_revoke = stream._barrier.revoke

    def __enter__(self) -> RevocationInsideRequest:
        callbacks = self.member._callbacks
        callbacks.poll = self._step_poll  # type: ignore[method-assign]
        callbacks.owned_now = self._owned_now  # type: ignore[method-assign]
        self.stream._barrier.revoke = self._revoke  # type: ignore[method-assign]
        self._hold.set()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hold.clear()
        callbacks = self.member._callbacks
        callbacks.poll = self._real_poll  # type: ignore[method-assign]
        callbacks.owned_now = self._real_owned  # type: ignore[method-assign]
        self.stream._barrier.revoke = self._real_revoke  # type: ignore[method-assign]

    def _step_poll(self, consumer: Any, timeout_s: float | None = None) -> None:
        if timeout_s is None and self._hold.is_set():  # the owner thread's own step: held
            time.sleep(0.01)
            return
        self._real_poll(consumer, timeout_s)

    def _owned_now(self, consumer: Any) -> frozenset[TopicPartition]:
        # The commit request's ownership check: polls until the revocation queued meanwhile
        # is delivered here, inside the request.
        deadline = time.monotonic() + 60
        while self._hold.is_set() and self.stream.metrics.revocations == 0:
            assert time.monotonic() < deadline, "no revocation was delivered"
            self._real_poll(consumer, 0.1)
        self._hold.clear()
        return self._real_owned(consumer)

    def _revoke(self, *args: Any, **kwargs: Any) -> Any:
        self.inside.append(self.member.waiting_callers())
        return self._real_revoke(*args, **kwargs)
