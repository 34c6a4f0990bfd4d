"""A rebalance held pending while other threads' requests run on the member's owner thread.

:class:`PendingRevocation` stops the owner thread's own polls (it still serves requests
between its steps), so a revocation the group starts meanwhile cannot be delivered: only a
request that polled could deliver it. It records every request the stream sends
(``GroupStream.REQUESTS``) and, for every revocation, how many requests were running on the
owner thread when it began: a request never polls, so that is always 0.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka.admin import AdminClient

from spark_groups.group.stream import GroupStream

from support.broker import wait_until


class PendingRevocation:
    """Within the block, ``stream``'s member does not poll until :meth:`deliver`."""

    def __init__(self, stream: GroupStream) -> None:
        self.stream = stream
        self.member = stream.ensure_started()
        #: The names of the requests sent to the owner thread, in order.
        self.requests: list[str] = []
        #: Per revocation, the requests running on the owner thread when it began.
        self.running_at_revocation: list[int] = []
        self._running = 0
        self._hold = threading.Event()
        callbacks, owner = self.member._callbacks, self.member._owner
        self._real_poll, self._real_run = callbacks.poll, owner._run_request
        self._real_revoke = stream._barrier.revoke
        self._real_on_owner = stream._on_owner

    def __enter__(self) -> PendingRevocation:
        callbacks, owner = self.member._callbacks, self.member._owner
        callbacks.poll = self._step_poll  # type: ignore[method-assign]
        owner._run_request = self._run_request  # type: ignore[method-assign]
        self.stream._barrier.revoke = self._revoke  # type: ignore[method-assign]
        self.stream._on_owner = self._on_owner  # type: ignore[assignment]
        self._hold.set()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hold.clear()
        callbacks, owner = self.member._callbacks, self.member._owner
        callbacks.poll = self._real_poll  # type: ignore[method-assign]
        owner._run_request = self._real_run  # type: ignore[method-assign]
        self.stream._barrier.revoke = self._real_revoke  # type: ignore[method-assign]
        self.stream._on_owner = self._real_on_owner

    def deliver(self) -> None:
        """Let the owner thread poll again: the pending revocation runs at its next step."""
        self._hold.clear()

    def wait_until_rebalancing(self, servers: str, members: int) -> None:
        """Return once the group has ``members`` members (a newcomer joined it: the rebalance
        has begun, and this member cannot take part before it polls)."""
        admin = AdminClient({"bootstrap.servers": servers})
        group = self.stream.options.group_id

        def joined() -> bool:
            found = admin.describe_consumer_groups([group])[group].result(10)
            return len(found.members) >= members

        wait_until(joined, what=f"{members} members in group {group}")

    def _step_poll(self, consumer: Any, timeout_s: float | None = None) -> None:
        if self._hold.is_set():  # the owner thread's own step: held
            time.sleep(0.01)
            return
        self._real_poll(consumer, timeout_s)

    def _run_request(self, *args: Any) -> None:
        self._running += 1
        try:
            self._real_run(*args)
        finally:
            self._running -= 1

    def _on_owner(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.requests.append(request.__name__)
        return self._real_on_owner(request, *args, **kwargs)

    def _revoke(self, *args: Any, **kwargs: Any) -> Any:
        self.running_at_revocation.append(self._running)
        return self._real_revoke(*args, **kwargs)
