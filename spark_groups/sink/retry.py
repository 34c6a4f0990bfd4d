"""Deciding a batch's commit again after a concurrent commit, for both kinds of batch.

delta-rs refused the commit (a commit after its snapshot set one of its transaction ids): the
batch is decided again after a random wait that grows with each attempt, at most
:data:`MAX_COMMIT_ATTEMPTS` times in all.
"""

from __future__ import annotations

import logging
import random
import time

log = logging.getLogger(__name__)

#: How many times a batch is decided and committed before concurrent commits make it fail.
MAX_COMMIT_ATTEMPTS = 10


def wait_to_decide_again(attempt: int, path: str, batch: str) -> bool:
    """After commit ``attempt`` (1, 2, ...) of ``batch`` (``"batch 7"``) into the table at
    ``path`` met a concurrent commit: wait a random moment (up to 40 ms after the first, at
    most 1 s) and return True; return False at once when that was the last attempt."""
    if attempt >= MAX_COMMIT_ATTEMPTS:
        return False
    delay = random.uniform(0.0, min(1.0, 0.02 * 2**attempt))
    log.info("sink %s: %s met a concurrent commit (attempt %d); deciding again in %.0f ms",
             path, batch, attempt, delay * 1000)  # fmt: skip
    time.sleep(delay)
    return True
