"""Rolling deploys, on a broker with Kafka's default group settings.

    python -m bench rolling                     # the rolling pass, three ways
    python -m bench rolling --ways classic,kip848 --rate 300
    python -m bench rolling --sim 20 --partitions 2000 --rate 2000 --trigger "2 seconds"

The figures and what each means are in docs/groups.md ("Rolling deploys"); the results in
``bench/results/rolling.json`` (``--out``). The idle-members hour (docs/groups.md, "Idle
members") was retired: ``--idle-minutes`` at commit 782b8d3.

The sides: per way (:data:`WAYS`: ``classic``, ``static`` with ``group.instance.id``,
``kip848``) three Spark members (:class:`support.members.Member`, one delta-group table) and
a plain consumer (:class:`support.services.PlainService`) in one group. The records: ids at
``--rate`` into ``--partitions`` throughout, each with when and by whom it was read
(:mod:`._rolling_reads`). The rounds: one pass per way, each Spark member in turn SIGTERMed,
started again and waited for until it reads again. ``--sim N``: N simulated members instead
(``tests/support/programs/sim_member.py``, the product without Spark's JVM: a big group on
this machine), each row with the same read time and reader.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness.kafka import PRODUCTION_GROUP_SETTINGS, broker
from bench.harness.procfs import machine_facts
from bench.scenarios._rolling_reads import (
    Reads,
    duplicates_by_cause,
    history_in,
    lost_and_duplicated,
    start,
    table_reads,
    wait_quantiles,
)
from spark_groups.group.history import history_path
from spark_groups.offsets import OffsetRange

from support.broker import create_topic, unique, wait_until
from support.members import SIM_MEMBER, Member, member_spec, stop_all
from support.producers import IdProducer
from support.services import PlainService
from support.tables import reading_commits, unfinished_batch

#: The classic protocol's member settings at Kafka's defaults.
CLASSIC = {
    "partition.assignment.strategy": "cooperative-sticky",
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
}

#: No section of docs/benchmarks.md: the figures are in docs/groups.md ("Rolling deploys").
SECTION = None

#: The ways the pass runs, in order.
WAYS = ("classic", "static", "kip848")

#: Spark members' names (deployment slots).
SLOTS = ("A", "B", "C")


def group_settings(way: str, slot: str, static_session_ms: int) -> dict[str, str]:
    """One member's group settings (librdkafka's names) for ``way``; ``slot`` names its
    static identity."""
    if way == "kip848":
        return {"group.protocol": "consumer"}
    settings = dict(CLASSIC)
    if way == "static":
        settings["group.instance.id"] = f"rolling-{slot}"
        settings["session.timeout.ms"] = str(static_session_ms)
    elif way != "classic":
        raise ValueError(f"unknown way {way!r}: one of {', '.join(WAYS)}")
    return settings


def source_options(settings: dict[str, str]) -> dict[str, str]:
    """The kafka-group source options that set ``settings`` (librdkafka's names)."""
    return {
        (k if k == "partition.assignment.strategy" else f"kafka.{k}"): v
        for k, v in settings.items()
    }


def run_way(
    way: str, servers: str, base: Path, args: argparse.Namespace, say: Callable[[str], None]
) -> dict[str, Any]:
    """One rolling pass of ``way`` (see the module doc)."""
    scratch = base / way
    scratch.mkdir(parents=True)
    # Simulated: records timed by their append, so that a producer's stall on a saturated
    # machine (behind a timed-out request) does not count as the members' wait.
    appended = {"message.timestamp.type": "LogAppendTime"} if args.sim else None
    topic = create_topic(servers, args.partitions, f"rolling-{way}", appended)
    group = unique(f"rolling-{way}")
    spec, logs, stop_file = member_spec(servers, topic, group, scratch, args.trigger)
    table = spec["table"]
    members = []
    for slot in [f"m{i:02d}" for i in range(args.sim)] or SLOTS:
        options = source_options(group_settings(way, slot, args.static_session_ms))
        checkpoint = str(scratch / f"cp-{slot}")
        if args.sim:  # its own checkpoint and sink.table; the Spark members' history table
            options["rebalances.table"] = history_path(spec["ledger"])
            own = {"checkpoint": checkpoint, "source_options": options, "max_records": 10**7,
                   "trigger_s": float(args.trigger.split()[0])}  # fmt: skip
            members.append(Member(slot, {**spec, **own}, logs, SIM_MEMBER))
            continue
        options["sink.table"] = table  # the barrier ends once the batch is in the table
        # A replay after the restart reads only what is still this member's (docs/groups.md)
        options["checkpointLocation"] = checkpoint
        own = {"checkpoint": checkpoint, "source_options": options}
        members.append(Member(slot, {**spec, **own}, logs))
    producer = IdProducer(servers, topic, args.partitions, per_second=args.rate)
    service = PlainService(
        servers, topic, group, group_settings(way, "service", args.static_session_ms)
    )
    restarts: list[dict[str, Any]] = []
    replayed: list[OffsetRange] = []
    result: dict[str, Any] = {"topic": topic, "group": group, "scratch": str(scratch)}
    producer.start()
    try:
        for m in members:
            start(m)
        service.start()
        wait_until(lambda: all(reading_commits(table, m.name) for m in members) and
                   bool(service.reads), args.timeout, f"{way}: all reading")  # fmt: skip
        say(f"{way}: all read; steady for {args.settle:g} s")
        steady_since = time.time()
        time.sleep(args.settle)  # the steady window: the baseline of the unread times
        pass_since = time.time()
        for m in members:
            before = reading_commits(table, m.name)
            sigterm_at = time.time()
            exited_s = m.terminate(args.timeout)
            unfinished = unfinished_batch(m.spec["checkpoint"])
            replayed.extend(unfinished)
            time.sleep(args.pause)  # away as long as a Spark member's start takes (~35 s)
            start(m)
            started_at = time.time()
            wait_until(
                lambda m=m, before=before: reading_commits(table, m.name) > before,  # type: ignore[misc]
                args.timeout,
                f"{way}: {m.name} to read again",
                poll_s=0.05,  # timed: start_to_reading_s
            )
            restarts.append({
                "member": m.name, "sigterm_to_exit_s": round(exited_s, 2),
                "sigterm_to_restart_s": round(started_at - sigterm_at, 2),
                "start_to_reading_s": round(time.time() - started_at, 2),
                "replayed_ranges": [str(r) for r in unfinished],
            })  # fmt: skip
            say(f"{way}: {json.dumps(restarts[-1])}")
            for other in members:
                if not other.running:
                    tail = other.log_text()[-2000:]
                    raise RuntimeError(f"{way}: member {other.name} exited: {tail}")
        pass_until = time.time() + args.settle
        time.sleep(args.settle)  # handovers still settling after the last member reads
        producer.stop_event.set()
        producer.join(60)
        if producer.error is not None:
            raise RuntimeError(f"producer: {producer.error}")
        produced = set(producer.acked)

        def handled() -> set[int]:
            return set(table_reads(table).column("id").to_pylist()) | {r[0] for r in service.reads}

        try:
            wait_until(lambda: handled() >= produced, args.timeout, f"{way}: every id handled")
        except AssertionError:
            # librdkafka's KIP-848 consumer can stop fetching partitions it owns (docs/
            # benchmarks.md): noted, then closed, so its partitions go to the members.
            stalled = stalled_service(service, produced - handled(), args.partitions)
            say(f"{way}: the plain consumer stalled: {json.dumps(stalled)}")
            result["service_stalled"] = stalled
            service.stop()
            wait_until(lambda: handled() >= produced, args.timeout, f"{way}: ids after it left")
        stop_all(members, stop_file, args.timeout)
        service.stop()
    finally:
        producer.stop_event.set()
        service.stop_event.set()
        for m in members:
            m.kill()
            m.reap()

    reads = Reads(table, service)
    lost, twice = lost_and_duplicated(produced, reads.ids)
    gaps = reads.longest_gaps(pass_since, pass_until, not_before=steady_since)
    steady = reads.longest_gaps(steady_since, pass_since, not_before=steady_since, inside=True)
    waits = reads.longest_waits(pass_since, pass_until, set(twice))
    history = history_in(history_path(spec["ledger"]), pass_since, pass_until)
    service_events = [e for e in service.events if pass_since <= e["at"] <= pass_until]
    generations = {r["generation"] for r in history} | {
        e["generation"] for e in service_events if e["generation"] >= 0
    }
    unread = sorted(g["gap_s"] for g in gaps.values())
    events = Counter(r["event"] for r in history)
    result.update(
        {
            "settings": group_settings(way, "<slot>", args.static_session_ms),
            "restarts": restarts,
            "produced": len(produced),
            "in_table": len(reads.ids) - len(service.reads),
            "by_service": len(service.reads),
            "lost": len(lost),
            "duplicated": len(twice),
            "lost_sample": lost[:20],
            "duplicated_sample": twice[:20],
            "duplicated_by_cause": duplicates_by_cause(reads, twice, replayed),
            "longest_unread_s": unread[-1],
            "median_partition_longest_unread_s": unread[len(unread) // 2],
            "steady_longest_unread_s": max(g["gap_s"] for g in steady.values()),
            "longest_record_wait_s": max(waits.values()),
            "record_waits_s": wait_quantiles(reads, pass_since, pass_until, set(twice)),
            "unread_by_partition": gaps,
            "record_wait_by_partition": waits,
            "revocations": events["revoked"]
            + events["lost"]
            + sum(len(e["partitions"]) for e in service_events if e["event"] != "assigned"),
            "history_revocations": events["revoked"],
            "history_lost": events["lost"],
            "service_revocations": sum(
                len(e["partitions"]) for e in service_events if e["event"] == "revoked"
            ),
            "rebalances": len(generations),
            "generations": sorted(generations),
            "service_commit_failures": service.commit_failures,
            "barrier_timeouts_logged": "".join(m.log_text() for m in members).count(
                "revocation barrier timed out"
            ),
            "barrier_waits": sum(1 for r in history if r["waited_for_batch"] not in (None, -1)),
            "barrier_wait_max_ms": max((r["barrier_wait_ms"] or 0 for r in history), default=0),
            "pass_s": round(pass_until - args.settle - pass_since, 1),
        }
    )
    return result


def stalled_service(service: PlainService, unhandled: set[int], partitions: int) -> dict[str, Any]:
    """What the plain consumer left unread: the unhandled ids' partitions (id ``i`` goes to
    partition ``i % partitions``). Raises when one is not the consumer's: a member lost it."""
    owned: set[int] = set()
    for e in service.events:  # incremental: cooperative-sticky and KIP-848 alike
        change = set(e["partitions"])
        owned = owned | change if e["event"] == "assigned" else owned - change
    waiting = sorted({i % partitions for i in unhandled})
    if not owned.issuperset(waiting):
        raise AssertionError(f"ids unhandled in {sorted(set(waiting) - owned)}, not its own")
    return {"unhandled_ids": len(unhandled), "partitions_unread": waiting,
            "partitions_owned": len(owned), "noted_at": time.time()}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--ways", default=",".join(WAYS), help="comma-separated")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=300, help="records/s produced")
    parser.add_argument("--trigger", default="2 seconds", help="the members' trigger")
    parser.add_argument("--settle", type=float, default=20.0, help="steady window, s")
    parser.add_argument("--static-session-ms", type=int, default=300_000)
    parser.add_argument("--timeout", type=float, default=300.0, help="per wait, s")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--sim", type=int, default=0, help="N simulated members, not Spark")
    parser.add_argument("--pause", type=float, default=0.0, help="s between exit and start")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The rolling pass of every way; the idle run's saved results are kept from ``--out``."""
    ways = [w for w in args.ways.split(",") if w]
    for way in ways:
        group_settings(way, "x", args.static_session_ms)  # an unknown way fails here
    os.environ.setdefault("SPARK_GROUPS_LOG_LEVEL", "INFO")

    def say(line: str) -> None:
        print(f"{datetime.now(UTC):%H:%M:%S} {line}", flush=True)

    # SIGTERM ends the run through the finally blocks: members, consumer and broker stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    base = Path(tempfile.mkdtemp(prefix="rolling-"))
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    results = {k: results[k] for k in ("rolling", "idle") if k in results}
    given = {k: v for k, v in vars(args).items() if k not in ("out", "render")}
    try:
        with broker("kafka", PRODUCTION_GROUP_SETTINGS) as kafka:
            done: dict[str, Any] = {
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "load_before": os.getloadavg(),
                "ways": {},
            }
            for way in ways:
                done["ways"][way] = run_way(way, kafka.bootstrap_servers, base, args, say)
                say(f"{way}: " + json.dumps(summary_row(done["ways"][way])))
            done["load_after"] = os.getloadavg()
            done["machine"] = machine_facts("kafka")
            done["broker_group_settings"] = PRODUCTION_GROUP_SETTINGS
            done["args"] = given
            results["rolling"] = done
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return results


def render(results: dict[str, Any]) -> str:
    """The numbers of docs/groups.md's table ("Rolling deploys"), as text."""
    lines = []
    for way, r in results.get("rolling", {}).get("ways", {}).items():
        lines.append(f"{way} {json.dumps(summary_row(r))}")
    return "\n".join(lines)


def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one way that go into the table of docs/groups.md."""
    keys = (
        "longest_unread_s", "median_partition_longest_unread_s", "steady_longest_unread_s",
        "longest_record_wait_s", "revocations", "rebalances", "produced", "lost", "duplicated",
        "barrier_waits", "barrier_timeouts_logged",
    )  # fmt: skip
    return {k: r.get(k) for k in keys}
