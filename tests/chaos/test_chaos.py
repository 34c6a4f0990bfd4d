"""Chaos: three Spark members of one group write into ONE exactly-once Delta table while
members are SIGTERMed, SIGKILLed, restarted and joined every few seconds, and a producer
writes numbered records throughout. An at-least-once sink (a plain consumer of a second group
that fsyncs before it commits) is killed and restarted on the same schedule.

At the end every produced id must be in the exactly-once table exactly once, and in the
at-least-once output at least once. Run alone with ``pytest tests/chaos -s``; the chaos phase
lasts ``$CHAOS_SECONDS`` (default 60 s; the whole test takes about three times that).
The accounting is printed and, with ``$CHAOS_REPORT`` set, written there as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

from support.broker import unique, wait_until
from support.members import AloConsumer, Member, member_spec
from support.producers import IdProducer
from support.tables import sink_commits, table_ids

PARTITIONS = 6


def terminate(target: Member | AloConsumer) -> None:
    """SIGTERM the program alone (a member's driver, as an orchestrator stopping it would),
    then clear up what is left of its process group."""
    target.signal(signal.SIGTERM, group=False)
    try:
        target.wait(60)
    finally:
        target.reap()


def test_chaos_every_record_exactly_once_and_at_least_once(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    chaos_s = float(os.environ.get("CHAOS_SECONDS", "60"))
    topic = make_topic(PARTITIONS)
    group, table = unique("chaos"), tmp_path / "table"
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "2 seconds")
    members = {
        name: Member(name, {**spec, "checkpoint": str(tmp_path / f"cp-{name}")}, logs)
        for name in ("A", "B", "C")
    }
    a, b, c = members.values()
    alo = AloConsumer(bootstrap_servers, topic, unique("alo"), logs)
    producer = IdProducer(bootstrap_servers, topic, PARTITIONS, per_second=100)
    faults: Counter[str] = Counter()

    # The schedule: (action, target), one every few seconds, cycling until the time is up.
    # An action whose target is in the wrong state (e.g. restart of a live member) is skipped.
    schedule = [
        ("join", c), ("sigkill", a), ("sigkill", alo), ("restart", a), ("restart", alo),
        ("sigterm", b), ("restart", b), ("sigkill", c), ("sigterm", alo), ("restart", c),
        ("restart", alo), ("sigterm", a), ("restart", a), ("sigkill", b), ("restart", b),
    ]  # fmt: skip

    def act(action: str, target: Member | AloConsumer) -> bool:
        live = target.running
        if action in ("join", "restart"):
            if live:
                return False
            target.start()
        elif not live:
            return False
        elif action == "sigkill":
            target.kill()
        else:
            terminate(target)
        return True

    producer.start()
    started = time.monotonic()
    try:
        a.start()
        b.start()
        alo.start()
        wait_until(lambda: len(sink_commits(table)) >= 2, 240, "the first sink commits")
        chaos_end = time.monotonic() + chaos_s
        step = 0
        while time.monotonic() < chaos_end:
            action, target = schedule[step % len(schedule)]
            step += 1
            if act(action, target):
                faults[action] += 1
                print(f"{time.monotonic() - started:6.1f}s {action} {target.name}", flush=True)
                time.sleep(6)
        # Recovery: everyone back, the producer stops, every id must land.
        for target in (*members.values(), alo):
            act("restart", target)
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        wait_until(lambda: set(table_ids(table)) >= produced, 300, "every id in the table")
        wait_until(lambda: set(alo.ids()) >= produced, 120, "every id at least once")
        stop_file.touch()
        for member in members.values():
            assert member.wait(120) == 0, member.log_text()[-3000:]
    finally:
        producer.stop_event.set()
        for target in (*members.values(), alo):
            target.kill()

    exactly = Counter(table_ids(table))
    at_least = Counter(alo.ids())
    report = {
        "chaos_seconds": chaos_s,
        "partitions": PARTITIONS,
        "faults": dict(faults),
        "member_starts": {m.name: m.runs for m in members.values()},
        "produced": len(produced),
        "exactly_once": {
            "written": sum(exactly.values()),
            "duplicates": sum(n - 1 for n in exactly.values() if n > 1),
            "missing": len(produced - set(exactly)),
            "unexpected": len(set(exactly) - produced),
            "sink_commits": len(sink_commits(table)),
        },
        "at_least_once": {
            "written": sum(at_least.values()),
            "duplicates": sum(n - 1 for n in at_least.values() if n > 1),
            "missing": len(produced - set(at_least)),
        },
    }
    print("chaos accounting:", json.dumps(report, indent=2))
    if os.environ.get("CHAOS_REPORT"):
        Path(os.environ["CHAOS_REPORT"]).write_text(json.dumps(report, indent=2))
    assert sum(faults.values()) >= 4, f"too few faults injected: {dict(faults)}"
    assert report["exactly_once"]["missing"] == 0
    assert report["exactly_once"]["duplicates"] == 0
    assert report["exactly_once"]["unexpected"] == 0
    assert report["at_least_once"]["missing"] == 0
