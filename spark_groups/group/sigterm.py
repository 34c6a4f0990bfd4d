"""Leave the consumer group when SIGTERM ends the process, without deadlocking.

Spark ends the long-lived reader process with SIGTERM (twice, a few milliseconds apart)
and may never call the reader's ``stop()``. A member that simply dies stays in the group
until its session times out, so the handler installed here leaves first.

A Python signal handler runs on the main thread *between two bytecodes*: possibly inside
``logging``'s handler lock or another lock the main thread holds at that moment. Leaving
needs the member's owner thread to finish (``consumer.close()`` runs the revocation
callback, which logs), so a handler that waits for it could wait forever on a lock its own
thread holds. Hence the order:

1. The handler only records the signal and starts a *leaver* thread; it returns at once,
   so the main thread releases whatever it held. A second SIGTERM while leaving is ignored.
2. The leaver thread calls ``leave()`` (LeaveGroup, clients closed); it is not a daemon
   thread, so an interpreter that exits meanwhile still waits for it.
3. Then it sends SIGTERM again. The handler, seeing the member has left, restores the
   handler that was there before and hands the signal on: by default the process ends as
   SIGTERM asked.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def leave_on_sigterm(leave: Callable[[], None], what: str) -> bool:
    """Install a SIGTERM handler that runs ``leave`` on a thread of its own, then lets the
    signal do what it did before (by default: end the process).

    ``what`` names what is left, for the log. Returns False (and installs nothing) when
    called off the main thread, where Python cannot install signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # installed outside Python: hand the signal to the default action
        previous = signal.SIG_DFL
    left = threading.Event()
    leaving = threading.Lock()

    def leave_then_resignal() -> None:
        log.info("SIGTERM: leaving %s", what)
        try:
            leave()
        except Exception:  # the process ends either way; say why the leave was not clean
            log.exception("SIGTERM: leaving %s failed", what)
        finally:
            left.set()
            os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if left.is_set():
            signal.signal(signal.SIGTERM, previous)
            if callable(previous):
                previous(signum, frame)
            else:
                os.kill(os.getpid(), signal.SIGTERM)
            return
        if not leaving.acquire(blocking=False):
            return  # already leaving: Spark's second SIGTERM
        threading.Thread(
            target=leave_then_resignal, name="spark-groups-sigterm", daemon=False
        ).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    return True
