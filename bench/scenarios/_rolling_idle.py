"""The idle-members part of the rolling scenario (``--idle-minutes``, issue 25 part 2)."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.kafka import create_topics, unique, wait_until
from bench.members import IdProducer, Member, member_spec, reading_commits
from bench.scenarios._rolling_reads import lost_and_duplicated, start, table_reads
from spark_groups.metrics import coordinator_metrics

#: The classic protocol's member settings at Kafka's defaults.
CLASSIC = {
    "partition.assignment.strategy": "cooperative-sticky",
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
}


def source_options(settings: dict[str, str]) -> dict[str, str]:
    """The kafka-group source options that set ``settings`` (librdkafka's names)."""
    return {
        (k if k == "partition.assignment.strategy" else f"kafka.{k}"): v
        for k, v in settings.items()
    }


def progress_metrics(path: Path) -> dict[str, Any] | None:
    """The kafka-group coordinator metrics of a member's last progress (None: none yet)."""
    try:
        found = coordinator_metrics(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
    return found[0] if found else None


def run_idle(
    servers: str, base: Path, args: argparse.Namespace, say: Callable[[str], None]
) -> dict[str, Any]:
    """Two Spark members on one partition for ``--idle-minutes`` (see the module doc)."""
    scratch = base / "idle"
    scratch.mkdir(parents=True)
    topic = create_topics(servers, 1, prefix="idle")[0]
    group = unique("idle")
    spec, logs, stop_file = member_spec(servers, topic, group, scratch, args.trigger)
    table = spec["table"]
    options = {**source_options(CLASSIC), "sink.table": table}
    members = {
        slot: Member(
            slot,
            {
                **spec,
                "checkpoint": str(scratch / f"cp-{slot}"),
                "source_options": options,
                "progress_file": str(scratch / f"progress-{slot}.json"),
            },
            logs,
        )
        for slot in ("A", "B")
    }

    def metrics(slot: str) -> dict[str, Any] | None:
        return progress_metrics(Path(members[slot].spec["progress_file"]))

    def idle_one() -> str | None:
        """The member whose last progress says idle while the other reads."""
        for slot in members:
            m = metrics(slot)
            if m is not None and m.get("idle") is True:
                return slot
        return None

    producer = IdProducer(servers, topic, 1, per_second=args.idle_rate)
    cycles: list[dict[str, Any]] = []
    samples = {"A": Counter(), "B": Counter()}  # type: dict[str, Counter[str]]
    started = time.time()
    producer.start()
    try:
        start(members["A"])
        wait_until(lambda: reading_commits(table, "A") > 0, args.timeout, "A to read")
        start(members["B"])
        wait_until(lambda: idle_one() == "B", args.timeout, "B to report idle")
        say("idle: B is idle")
        deadline = started + args.idle_minutes * 60
        next_takeover = time.time() + args.takeover_every
        while time.time() < deadline:
            for slot, m in members.items():
                assert m.proc is not None
                if m.proc.poll() is not None:
                    raise RuntimeError(f"idle: {slot} exited: {m.log_text()[-2000:]}")
                got = metrics(slot)
                samples[slot]["idle" if got and got.get("idle") else "reading"] += 1
            if time.time() >= next_takeover and time.time() + 120 < deadline:
                spare = idle_one()
                if spare is None:
                    raise RuntimeError("idle: no member reports idle")
                active = "A" if spare == "B" else "B"
                before = reading_commits(table, spare)
                sigterm_at = time.time()
                members[active].terminate(args.timeout)
                wait_until(
                    lambda spare=spare, before=before: reading_commits(table, spare) > before,  # type: ignore[misc]
                    args.timeout,
                    f"idle: {spare} to take the partition over",
                )
                took_over_s = time.time() - sigterm_at
                start(members[active])
                wait_until(
                    lambda active=active: idle_one() == active,  # type: ignore[misc]
                    args.timeout,
                    f"idle: {active} to report idle",
                )
                cycles.append(
                    {
                        "stopped": active,
                        "took_over": spare,
                        "sigterm_to_takeover_read_s": round(took_over_s, 2),
                        "restart_to_idle_s": round(time.time() - sigterm_at - took_over_s, 2),
                        "idle_metrics": metrics(active),
                    }
                )
                say(f"idle: {json.dumps(cycles[-1], default=str)}")
                next_takeover = time.time() + args.takeover_every
            time.sleep(5)
        producer.stop_event.set()
        producer.join(60)
        produced = set(producer.acked)
        wait_until(
            lambda: set(table_reads(table).column("id").to_pylist()) >= produced,
            args.timeout,
            "idle: every id in the table",
        )
        stop_file.touch()
        statuses = {}
        for slot, m in members.items():
            assert m.proc is not None
            statuses[slot] = m.proc.wait(args.timeout)
    finally:
        producer.stop_event.set()
        for m in members.values():
            m.kill()
            m.reap()
    ids = table_reads(table).column("id").to_pylist()
    lost, twice = lost_and_duplicated(produced, ids)
    logs_text = "".join(m.log_text() for m in members.values())
    return {
        "topic": topic,
        "group": group,
        "scratch": str(scratch),
        "settings": CLASSIC,
        "minutes": round((time.time() - started) / 60, 1),
        "cycles": cycles,
        "progress_samples": {k: dict(v) for k, v in samples.items()},
        "exit_statuses": statuses,
        "error_lines": [
            line for line in logs_text.splitlines() if " ERROR " in line or "Traceback" in line
        ][:20],
        "idle_log_lines": logs_text.count("owns no partitions (more members than partitions)"),
        "produced": len(produced),
        "lost": len(lost),
        "duplicated": len(twice),
    }
