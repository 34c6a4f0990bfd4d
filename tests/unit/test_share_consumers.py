"""A worker's share consumers wait in the read path's pool (spark_groups.read.pool), so a
forked child starts with none of them, as it does with read-path consumers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: A process that pools a share consumer, forks, and in the child checks out one for the same
#: configuration. Exit 0 when the child found the pool empty (the inherited consumer
#: abandoned, never closed) and got a consumer of its own, and the parent still gets its pooled
#: one. The consumers are stand-ins: the child must never wait on librdkafka (it is not
#: fork-safe; tests/unit/test_reader.py's forked-worker test says why), and these tests need no
#: share-group broker.
_FORK_PROGRAM = """
import os, sys, time
from spark_groups.read import pool
from spark_groups.share import consumers

class StandIn:
    def close(self):
        raise AssertionError("an inherited consumer was closed")

consumers.create_share_consumer = lambda config, topics: StandIn()
config, topics = {"bootstrap.servers": "127.0.0.1:1", "group.id": "q"}, ["orders"]
mine = consumers.checkout(config, topics)
mine.exposed(1.0)
consumers.checkin(mine)
[(key, [inherited])] = pool._POOL.items()
assert inherited is mine, "the share consumer waits in the read path's pool"
pid = os.fork()
if pid == 0:
    ok = not pool._POOL and inherited in pool._ABANDONED  # inherited: kept, never closed
    own = consumers.checkout(config, topics)
    ok = ok and own is not inherited and own.key[0] == os.getpid()
    ok = ok and own.exposed_since is None
    os._exit(0 if ok else 3)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)  # polling a child's exit with a deadline
else:
    os.kill(pid, 9)
    sys.exit("the forked child hung")
assert os.waitstatus_to_exitcode(status) == 0, f"the child: {status}"
again = consumers.checkout(config, topics)
assert again is mine and again.exposed_since == 1.0, "the parent's pooled consumer"
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_worker_gets_no_inherited_share_consumer() -> None:
    """A share consumer pooled before a fork is abandoned in the child (kept alive, never
    used or closed) and the child makes its own; the parent keeps reading on its pooled one,
    with its exposure bookkeeping. The fork happens in a process of its own."""
    program = [sys.executable, "-c", _FORK_PROGRAM]
    done = subprocess.run(program, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (
        f"exit {done.returncode}: {done.stdout[-500:]} {done.stderr[-4000:]}"
    )
