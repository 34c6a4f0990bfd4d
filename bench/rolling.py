"""Rolling deploys and idle members, on a broker with Kafka's default group settings.

    PYTHONPATH=. python -m bench.rolling                     # the rolling pass, three ways
    PYTHONPATH=. python -m bench.rolling --ways classic,kip848 --rate 300
    PYTHONPATH=. python -m bench.rolling --idle-minutes 60   # more members than partitions

**Rolling pass** (issue 25, part 1). For each way, on a topic of ``--partitions`` (12)
partitions of its own, with a producer writing ids at ``--rate`` records/s throughout: three
Spark members (``bench/sink_member.py`` processes, each its own checkpoint, one shared
delta-group table and ledger) and one plain confluent-kafka consumer (a service that
processes each record and commits after every poll and in its revocation callback) share one
group. Once all read, each Spark member in turn is restarted the way a deployment does it:
SIGTERM to its process group (see :meth:`bench.members.Member.terminate`), wait for it to
exit, start it again, wait until it reads again (its first sink commit with records), next.

Ways (the group's settings, the same for the Spark members and the plain consumer):

* ``classic``: classic protocol, ``cooperative-sticky``, Kafka's default member timings
  (45 s session, 3 s heartbeat);
* ``static``: the same with static membership: ``group.instance.id`` per member (a stable
  slot name) and a session timeout (``--static-session-ms``, 300 s) longer than a restart;
* ``kip848``: ``group.protocol=consumer`` (the broker assigns; session and heartbeat are the
  broker's: 45 s and 5 s).

What is measured, per way:

* **Longest unread time per partition.** Every record carries the time it was read: a Spark
  member's pipeline adds ``reflect('java.lang.System', 'currentTimeMillis')``, evaluated per
  row on the executor as the batch reads it, and the reader (``A#2``: member A's 2nd run);
  the plain consumer notes the time its poll returned the record. Sorted by that time, the
  gaps between consecutive reads of a partition are the times nobody read it (records keep
  arriving, ~``rate/partitions`` per second, so a reader that reads leaves no long gap): a
  handover's gap runs from the old owner's last read to the new owner's first. Only reads
  that landed count (rows of the table, records the consumer processed); a batch read and
  then lost to the SIGTERM counts for the reader that read it again. Reported: the longest
  gap that overlaps the rolling pass (first SIGTERM to the last member reading again, plus
  ``--settle`` seconds) and starts after every member first read (the start-up's joins do
  not count), per partition, with who read before and after it; and the longest gap lying
  within the ``--settle`` seconds of steady reading before the pass (the trigger interval
  and the batch's own time), the baseline to compare with.
* **Longest record wait**: per partition, the most any record waited between being
  produced (Kafka's CreateTime) and being read, in the pass window, leaving out the ids
  handled twice (a replay reads them late).
* **Revocations**: the ``revoked`` and ``lost`` rows of the rebalance history (the ledger's
  ``<ledger>_rebalances``) in the pass window, one per partition, plus the plain consumer's
  revoked and lost partitions.
* **Rebalances**: the distinct group generations (KIP-848: member epochs) that the
  history's rows and the plain consumer's callbacks carry in the pass window.
* **Lost / duplicated**: every id the broker acknowledged must be in the table or processed
  by the plain consumer, and no id twice across both. Duplicates are split by cause: twice
  in the table; in the table and by the plain consumer where the table's row lies in a batch
  that a SIGTERM cut short and the restarted member replayed from its checkpoint
  (:func:`bench.members.unfinished_batch`; the plain consumer may have taken that partition
  over and processed the range meanwhile, which the sink cannot see); otherwise.

**Idle members** (issue 25, part 2; ``--idle-minutes``). Two Spark members on a
1-partition topic, classic cooperative-sticky: one reads, the other is idle. Its progress
(``bench/sink_member.py``'s ``progress_file``, through
:func:`spark_groups.metrics.coordinator_metrics`) must say ``idle: true``, its process must
stay up without an error in its log, and every ``--takeover-every`` seconds the reading
member is SIGTERMed: the idle one must take the partition over (its first read is timed),
and the stopped one, started again, becomes the idle one. Lost / duplicated as above.

Results: bench/results/rolling.json (``--out``); the idle run adds ``idle`` to it. The table
is in docs/groups.md ("Rolling deploys").
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from deltalake import DeltaTable, QueryBuilder

from bench.common import create_topics, load_average, machine_facts, unique, wait_until
from bench.members import IdProducer, Member, member_spec, sink_commits, unfinished_batch
from bench.scheduled import PRODUCTION_GROUP_SETTINGS
from spark_groups.group.history import history_path, read_history
from spark_groups.group.member import parse_generation
from spark_groups.metrics import coordinator_metrics
from spark_groups.offsets import OffsetRange

ROOT = Path(__file__).resolve().parent.parent

#: The ways the pass runs, in order.
WAYS = ("classic", "static", "kip848")

#: The classic protocol's member settings at Kafka's defaults.
CLASSIC = {
    "partition.assignment.strategy": "cooperative-sticky",
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
}

#: The pipeline of each Spark member: the id, its position, when it was produced, when it
#: was read (per row, on the executor) and by whom.
READ_SQL = (
    "SELECT cast(cast(value AS string) AS long) AS id, topic, partition, offset, "
    "timestamp AS produced_at, "
    "cast(reflect('java.lang.System', 'currentTimeMillis') AS long) AS read_ms, "
    "'{reader}' AS reader FROM source"
)

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


class PlainService(threading.Thread):
    """A consumer service in the group (confluent-kafka): processes each record (notes its
    id and when it was read), commits what it processed after every poll and, synchronously,
    in its revocation callback, so the next owner starts right after it. Notes every
    assignment change with its time and generation."""

    def __init__(self, servers: str, topic: str, group: str, settings: dict[str, str]) -> None:
        super().__init__(daemon=True, name="plain-service")
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": group,
                "client.id": "rolling-service",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **settings,
            }
        )
        #: (id, partition, offset, read at (epoch s), produced at (epoch s)) per record.
        self.reads: list[tuple[int, int, int, float, float]] = []
        self.events: list[dict[str, Any]] = []
        self.commit_failures = 0
        self._processed: dict[int, int] = {}
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _generation(self) -> int:
        try:
            return parse_generation(self.consumer.consumer_group_metadata())
        except Exception:
            return -1

    def _note(self, event: str, partitions: list[KafkaTopicPartition]) -> None:
        self.events.append(
            {
                "event": event,
                "at": time.time(),
                "partitions": sorted(p.partition for p in partitions),
                "generation": self._generation(),
            }
        )

    def _commit(self, partitions: Iterable[int]) -> None:
        offsets = [
            KafkaTopicPartition(self.topic, p, self._processed[p])
            for p in partitions
            if p in self._processed
        ]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException:
            self.commit_failures += 1  # the next owner reads those records again

    def _on_assign(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        self._note("assigned", partitions)

    def _on_revoke(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        self._commit(p.partition for p in partitions)
        for p in partitions:
            self._processed.pop(p.partition, None)
        self._note("revoked", partitions)

    def _on_lost(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        for p in partitions:
            self._processed.pop(p.partition, None)
        self._note("lost", partitions)

    def run(self) -> None:
        try:
            self.consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )  # fmt: skip
            while not self.stop_event.is_set():
                records = self.consumer.consume(500, 0.2)
                now = time.time()
                touched = set()
                for r in records:
                    if r.error() is not None:
                        continue
                    p, offset = r.partition(), r.offset()
                    assert p is not None and offset is not None
                    self.reads.append((int(r.value()), p, offset, now, r.timestamp()[1] / 1000))
                    self._processed[p] = offset + 1
                    touched.add(p)
                self._commit(touched)
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()  # the revocation callback commits, then it leaves

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)
        if self.error is not None:
            raise RuntimeError(f"the plain consumer failed: {self.error}")


def reading_commits(table: str, member: str) -> int:
    """How many of ``member``'s sink commits wrote records."""
    return sum(
        1
        for c in sink_commits(table)
        if c["spark_groups.member"] == member
        and any(json.loads(c.get("spark_groups.ranges", "{}")).values())
    )


def table_reads(table: str) -> pa.Table:
    """id, partition, offset, read_ms, produced_ms and reader of every row of the sink
    table."""
    query = 'SELECT id, partition, "offset", read_ms, produced_at, reader FROM t'
    reader = QueryBuilder().register("t", DeltaTable(table)).execute(query)
    rows = pa.table(reader.read_all())
    micros = pc.cast(rows.column("produced_at").cast(pa.timestamp("us", tz="UTC")), pa.int64())
    return rows.append_column("produced_ms", pc.divide(micros, 1000))


def start(member: Member) -> None:
    """Start ``member`` with its reader name (slot and run) in the pipeline."""
    member.spec["sql"] = READ_SQL.format(reader=f"{member.name}#{member.runs + 1}")
    member.start()


class Reads:
    """Every landed read of one run: per partition, (read at (s), reader), sorted; and each
    record's wait from produced to read."""

    def __init__(self, table: str, service: PlainService | None) -> None:
        rows = table_reads(table).to_pydict()
        self.ids = list(rows["id"])
        #: Where each id was handled: ("table" | "service", partition, offset).
        self.handled: dict[int, list[tuple[str, int, int]]] = {}
        for record_id, p, offset in zip(rows["id"], rows["partition"], rows["offset"], strict=True):
            self.handled.setdefault(record_id, []).append(("table", p, offset))
        by_partition: dict[int, list[tuple[float, str]]] = {}
        waits: dict[int, list[tuple[float, float]]] = {}
        for record_id, p, read_ms, produced_ms, reader in zip(
            rows["id"], rows["partition"], rows["read_ms"], rows["produced_ms"], rows["reader"],
            strict=True,
        ):  # fmt: skip
            by_partition.setdefault(p, []).append((read_ms / 1000, reader))
            waits.setdefault(p, []).append(
                (read_ms / 1000, (read_ms - produced_ms) / 1000, record_id)
            )
        if service is not None:
            for record_id, p, offset, at, produced in service.reads:
                self.ids.append(record_id)
                self.handled.setdefault(record_id, []).append(("service", p, offset))
                by_partition.setdefault(p, []).append((at, "service"))
                waits.setdefault(p, []).append((at, at - produced, record_id))
        self.by_partition = {p: sorted(v) for p, v in sorted(by_partition.items())}
        self.waits = waits

    def longest_gaps(
        self, since: float, until: float, *, not_before: float, inside: bool = False
    ) -> dict[int, dict[str, Any]]:
        """Per partition, the longest gap between consecutive reads that overlaps
        [since, until] (``inside``: lies within it) and does not start before
        ``not_before`` (the start-up's joins are not counted), with the readers before and
        after it."""
        out: dict[int, dict[str, Any]] = {}
        for p, reads in self.by_partition.items():
            best: dict[str, Any] = {"gap_s": 0.0}
            for (t1, r1), (t2, r2) in itertools.pairwise(reads):
                if t1 < not_before or t2 < since or t1 > until or (inside and t2 > until):
                    continue
                if t2 - t1 > best["gap_s"]:
                    best = {"gap_s": round(t2 - t1, 3), "from": r1, "to": r2, "at": t1}
            out[p] = best
        return out

    def longest_waits(self, since: float, until: float, skip: set[int]) -> dict[int, float]:
        """Per partition, the longest produced-to-read wait of a record read in the window,
        leaving out the ids in ``skip`` (those handled twice: a replay reads them late)."""
        return {
            p: round(
                max((w for at, w, i in v if since <= at <= until and i not in skip), default=0.0),
                3,
            )
            for p, v in sorted(self.waits.items())
        }


def lost_and_duplicated(produced: set[int], ids: list[int]) -> tuple[list[int], list[int]]:
    """The produced ids handled nowhere, and the ids handled more than once."""
    counts = Counter(ids)
    return sorted(produced - set(counts)), sorted(i for i, n in counts.items() if n > 1)


def duplicates_by_cause(
    reads: Reads, twice: list[int], replayed: list[OffsetRange]
) -> dict[str, int]:
    """The duplicated ids by where they were handled twice: twice in the table, or in the
    table and by the plain consumer, the latter split by whether the table's row lies in a
    batch a SIGTERMed member had planned and replayed when it started again (``replayed``:
    its ranges)."""
    out = {
        "in_table_twice": 0,
        "table_and_service_in_replayed_batch": 0,
        "table_and_service_other": 0,
    }
    for record_id in twice:
        places = reads.handled[record_id]
        if sum(1 for where, _, _ in places if where == "table") > 1:
            out["in_table_twice"] += 1
            continue
        _, p, offset = next(x for x in places if x[0] == "table")
        if any(r.partition == p and r.from_offset <= offset < r.until_offset for r in replayed):
            out["table_and_service_in_replayed_batch"] += 1
        else:
            out["table_and_service_other"] += 1
    return out


def history_in(path: str, since: float, until: float) -> list[dict[str, Any]]:
    """The rebalance-history rows between ``since`` and ``until`` (epoch s)."""
    rows = read_history(path).to_pylist()
    return [r for r in rows if since <= r["at"].timestamp() <= until]


def run_way(
    way: str, servers: str, base: Path, args: argparse.Namespace, say: Callable[[str], None]
) -> dict[str, Any]:
    """One rolling pass of ``way`` (see the module doc)."""
    scratch = base / way
    scratch.mkdir(parents=True)
    topic = create_topics(servers, args.partitions, prefix=f"rolling-{way}")[0]
    group = unique(f"rolling-{way}")
    spec, logs, stop_file = member_spec(servers, topic, group, scratch, args.trigger)
    table = spec["table"]
    members = []
    for slot in SLOTS:
        options = source_options(group_settings(way, slot, args.static_session_ms))
        checkpoint = str(scratch / f"cp-{slot}")
        options["sink.table"] = table  # the barrier ends once the batch is in the table
        # A replay after the restart reads only what is still this member's (docs/groups.md)
        options["checkpointLocation"] = checkpoint
        members.append(
            Member(slot, {**spec, "checkpoint": checkpoint, "source_options": options}, logs)
        )
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
        wait_until(
            lambda: all(reading_commits(table, m.name) for m in members) and bool(service.reads),
            args.timeout,
            f"{way}: every member to read",
        )
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
            start(m)
            started_at = time.time()
            wait_until(
                lambda m=m, before=before: reading_commits(table, m.name) > before,  # type: ignore[misc]
                args.timeout,
                f"{way}: {m.name} to read again",
            )
            restarts.append(
                {
                    "member": m.name,
                    "sigterm_to_exit_s": round(exited_s, 2),
                    "sigterm_to_restart_s": round(started_at - sigterm_at, 2),
                    "start_to_reading_s": round(time.time() - started_at, 2),
                    "replayed_ranges": [str(r) for r in unfinished],
                }
            )
            say(f"{way}: {json.dumps(restarts[-1])}")
            for other in members:
                assert other.proc is not None
                if other.proc.poll() is not None:
                    raise RuntimeError(
                        f"{way}: member {other.name} exited: {other.log_text()[-2000:]}"
                    )
        pass_until = time.time() + args.settle
        time.sleep(args.settle)  # handovers still settling after the last member reads
        producer.stop_event.set()
        producer.join(60)
        if producer.error is not None:
            raise RuntimeError(f"producer: {producer.error}")
        produced = set(producer.acked)

        def handled() -> set[int]:
            return set(table_reads(table).column("id").to_pylist()) | {r[0] for r in service.reads}

        wait_until(lambda: handled() >= produced, args.timeout, f"{way}: every id handled")
        stop_file.touch()
        for m in members:
            assert m.proc is not None
            status = m.proc.wait(args.timeout)
            if status != 0:
                raise RuntimeError(f"{way}: {m.name} exited {status}: {m.log_text()[-2000:]}")
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
    revoked = sum(1 for r in history if r["event"] in ("revoked", "lost"))
    revoked += sum(len(e["partitions"]) for e in service_events if e["event"] != "assigned")
    logs_text = "".join(m.log_text() for m in members)
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
            "longest_unread_s": max(g["gap_s"] for g in gaps.values()),
            "median_partition_longest_unread_s": sorted(g["gap_s"] for g in gaps.values())[
                len(gaps) // 2
            ],
            "steady_longest_unread_s": max(g["gap_s"] for g in steady.values()),
            "longest_record_wait_s": max(waits.values()),
            "unread_by_partition": gaps,
            "record_wait_by_partition": waits,
            "revocations": revoked,
            "history_revocations": sum(1 for r in history if r["event"] == "revoked"),
            "history_lost": sum(1 for r in history if r["event"] == "lost"),
            "service_revocations": sum(
                len(e["partitions"]) for e in service_events if e["event"] == "revoked"
            ),
            "rebalances": len(generations),
            "generations": sorted(generations),
            "service_commit_failures": service.commit_failures,
            "barrier_timeouts_logged": logs_text.count("revocation barrier timed out"),
            "pass_s": round(pass_until - args.settle - pass_since, 1),
        }
    )
    return result


# ---------------------------------------------------------------------- idle members


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


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ways", default=",".join(WAYS), help="comma-separated; '' for none")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=300, help="records/s produced")
    parser.add_argument("--trigger", default="2 seconds", help="the members' trigger")
    parser.add_argument("--settle", type=float, default=20.0, help="steady window, s")
    parser.add_argument("--static-session-ms", type=int, default=300_000)
    parser.add_argument("--timeout", type=float, default=300.0, help="per wait, s")
    parser.add_argument("--idle-minutes", type=float, default=0.0, help="0: no idle run")
    parser.add_argument("--idle-rate", type=int, default=50, help="records/s, idle run")
    parser.add_argument("--takeover-every", type=float, default=300.0, help="idle run, s")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "rolling.json"))
    args = parser.parse_args(argv)
    ways = [w for w in args.ways.split(",") if w]
    for way in ways:
        group_settings(way, "x", args.static_session_ms)  # an unknown way fails here

    def say(line: str) -> None:
        print(f"{datetime.now(UTC):%H:%M:%S} {line}", flush=True)

    from spark_groups.tools.kafka_broker import KafkaBroker

    # SIGTERM ends the run through the finally blocks: members, consumer and broker stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    base = Path(tempfile.mkdtemp(prefix="rolling-"))
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    try:
        with KafkaBroker(server_properties=PRODUCTION_GROUP_SETTINGS) as broker:
            servers = broker.bootstrap_servers
            if ways:
                run: dict[str, Any] = {
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "command": "PYTHONPATH=. python -m bench.rolling "
                    + " ".join(sys.argv[1:] if argv is None else argv),
                    "load_before": load_average(),
                    "ways": {},
                }
                for way in ways:
                    run["ways"][way] = run_way(way, servers, base, args, say)
                    say(f"{way}: " + json.dumps(summary_row(run["ways"][way])))
                run["load_after"] = load_average()
                run["machine"] = machine_facts("kafka")
                run["broker_group_settings"] = PRODUCTION_GROUP_SETTINGS
                run["args"] = vars(args)
                results["rolling"] = run
            if args.idle_minutes > 0:
                idle = {
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "load_before": load_average(),
                }
                idle.update(run_idle(servers, base, args, say))
                idle["load_after"] = load_average()
                idle["broker_group_settings"] = PRODUCTION_GROUP_SETTINGS
                results["idle"] = idle
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if "rolling" in results:
        for way, r in results["rolling"]["ways"].items():
            print(way, json.dumps(summary_row(r)))
    return 0


def summary_row(r: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one way that go into the table of docs/groups.md."""
    keys = (
        "longest_unread_s", "median_partition_longest_unread_s", "steady_longest_unread_s",
        "longest_record_wait_s", "revocations", "rebalances", "produced", "lost", "duplicated",
    )  # fmt: skip
    return {k: r[k] for k in keys}


if __name__ == "__main__":
    os.environ.setdefault("SPARK_GROUPS_LOG_LEVEL", "INFO")
    raise SystemExit(main())
