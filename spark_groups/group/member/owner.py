"""One thread owns a client that only one thread at a time may use; others hand it requests.

Some clients (librdkafka's ``Consumer``: a second thread calling ``commit`` while another
polls hangs for many seconds) must only ever be used by one thread. An :class:`OwnerThread`
is that thread: it creates the client, sets it up, then steps it (a poll) in a loop and,
between steps, runs the functions other threads hand it through :meth:`~OwnerThread.call`
from a queue, handing each caller back its result or exception. With ``idle_s`` the step
does not wait (a poll with no timeout) and the thread waits on the queue instead, up to
``idle_s`` between steps: a request then runs as soon as it arrives, where it would wait for
the rest of a blocking poll (25 ms on average for the group member's 50 ms). Code that runs
inside a step and waits there keeps the queue moving by calling :meth:`~OwnerThread.serve`;
a request runs to its end before the next one starts. When asked to stop, or when a step
fails, it closes the client and fails the requests still queued.

It knows nothing about what the client is for: what it creates, does in a step and does to
close are the callables it is given, and its errors are made by the ``error`` factory.

Threads: :meth:`~OwnerThread.start`, :meth:`~OwnerThread.call`, :meth:`~OwnerThread.check`
and :meth:`~OwnerThread.stop` from any thread (``call`` on the owner thread itself runs the
function at once); :meth:`~OwnerThread.serve` and :meth:`~OwnerThread.fail` on the owner
thread only; the ``create``, ``setup``, ``step`` and ``close`` callables run on the owner
thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar, cast

C = TypeVar("C")
T = TypeVar("T")


class OwnerThread(Generic[C]):
    """The one thread that uses a client of type ``C`` (see the module documentation).

    ``what`` names the owner in its errors and log lines ("the {what} is closed"); ``error``
    makes the exception of each such message.
    """

    def __init__(
        self,
        name: str,
        what: str,
        *,
        create: Callable[[], C],
        setup: Callable[[C], None],
        step: Callable[[C], None],
        close: Callable[[C], None],
        error: Callable[[str], BaseException],
        log: logging.Logger,
        idle_s: float = 0.0,
    ) -> None:
        self._name = name
        self._idle_s = idle_s
        self._what = what
        self._create = create
        self._setup = setup
        self._step = step
        self._close = close
        self._error = error
        self._log = log
        self._requests: queue.SimpleQueue[tuple[Callable[[C], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._ident: int | None = None
        self._client: C | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._closing = False
        self._failure: BaseException | None = None

    # ----------------------------------------------------------------- any thread
    @property
    def failure(self) -> BaseException | None:
        """What stopped (or is stopping) the owner thread, if anything failed."""
        return self._failure

    @property
    def closing(self) -> bool:
        """True once the owner thread was asked to stop (``stop()`` or ``fail()``)."""
        return self._closing

    @property
    def stopped(self) -> bool:
        """True once the owner thread has closed its client and ended."""
        return self._stopped.is_set()

    def on_owner_thread(self) -> bool:
        """True when the calling thread is the owner thread."""
        return threading.get_ident() == self._ident

    def start(self, timeout_s: float) -> None:
        """Start the owner thread and wait until it has created and set up its client.

        Raises what failed meanwhile, or the ``error`` "the {what} did not start in time"
        after ``timeout_s``. Does nothing once started.
        """
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait(timeout_s)
        if self._failure is not None:
            raise self._failure
        if not self._ready.is_set():
            raise self._error(f"the {self._what} did not start in time")

    def stop(self, timeout_s: float) -> bool:
        """Ask the owner thread to close its client and end, and wait up to ``timeout_s``.

        Returns False when it is still running then. On the owner thread itself (or before
        ``start()``) it only asks, and returns True. Idempotent.
        """
        self._closing = True
        thread = self._thread
        if thread is None or self.on_owner_thread():
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def check(self) -> None:
        """Raise the failure that stopped the owner thread, if any; or the ``error`` "the
        {what} stopped unexpectedly" when it ended without being asked to."""
        if self._failure is not None:
            raise self._failure
        if self._stopped.is_set() and not self._closing:
            raise self._error(f"the {self._what} stopped unexpectedly")

    def call(self, fn: Callable[[C], T], timeout_s: float) -> T:
        """Run ``fn(client)`` on the owner thread and return its result (or raise its
        exception). The ``error`` "the {what} did not answer within ..." after ``timeout_s``;
        "the {what} is closed" once it has stopped."""
        if self.on_owner_thread():
            assert self._client is not None
            return fn(self._client)
        self.check()
        if self._stopped.is_set():
            raise self._error(f"the {self._what} is closed")
        future: Future[T] = Future()
        self._requests.put((fn, future))
        try:
            return future.result(timeout_s)
        except TimeoutError:
            raise self._error(f"the {self._what} did not answer within {timeout_s:.0f} s") from None

    # ----------------------------------------------------------------- owner thread
    def fail(self, failure: BaseException) -> None:
        """Owner thread: remember ``failure`` and stop after the current step (for client
        callbacks that cannot raise into the client). The first failure is the one kept:
        what follows it is its consequence (closing the client after a refused READ tore
        down a SASL handshake, and librdkafka reported that as refused credentials)."""
        if self._failure is None:
            self._failure = failure
        self._closing = True

    def serve(self, seconds: float) -> None:
        """Owner thread only: run queued requests for up to ``seconds`` (from code inside a
        step that waits)."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            try:
                request = self._requests.get(timeout=max(0.0, min(remaining, 0.02)))
            except queue.Empty:
                if remaining <= 0:
                    return
                continue
            self._run_request(*request)

    def _run_request(self, fn: Callable[[C], Any], future: Future[Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(cast(C, self._client)))
        except BaseException as exc:  # handed to the caller's thread
            future.set_exception(exc)

    def _drain(self) -> None:
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return
            self._run_request(*request)

    def _run(self) -> None:
        self._ident = threading.get_ident()
        try:
            self._client = self._create()
            self._setup(self._client)
            self._ready.set()
            while not self._closing:
                self._step(self._client)
                if self._idle_s:
                    self.serve(self._idle_s)  # runs each request as it arrives
                else:
                    self._drain()
        except BaseException as exc:
            if self._failure is None:  # else this is the consequence of that one (fail)
                self._failure = exc
            if not self._ready.is_set():
                self._log.error("%s could not start: %s", self._what, exc)
            else:
                self._log.exception("%s failed", self._what)
        finally:
            self._finish()
            self._ready.set()
            self._stopped.set()
            self._fail_pending()

    def _finish(self) -> None:
        """Close the client; it stays usable (``call`` on this thread) while it closes."""
        client = self._client
        if client is None:
            return
        try:
            self._close(client)
        finally:
            self._client = None

    def _fail_pending(self) -> None:
        while True:
            try:
                _, future = self._requests.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                # Requests queued before the owner thread failed get the cause, not "closed".
                future.set_exception(self._failure or self._error(f"the {self._what} is closed"))
