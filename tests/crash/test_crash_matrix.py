"""Every crash point of a batch x {SIGTERM, SIGKILL} x every kind of next owner.

One member (``A``, a ``support/programs/sim_member.py`` process: the product's driver, read
path and sink without Spark, see its doc) reads a topic that a producer keeps writing to,
into a ``delta-group`` table. Once ``A`` has committed two batches the test arms the crash point
(``spark_groups.crash_points``): the next time any of ``A``'s code reaches it, ``A``'s whole
process group gets the signal. No sleep picks the moment: the point does. Then the next owner
takes ``A``'s partitions over:

* ``restart``: ``A`` itself, started again from its checkpoint (its last batch replayed);
* ``spark``: another member of the group (its own checkpoint, the same table);
* ``plain``: a confluent-kafka service with :class:`spark_groups.handover.SinkTableHandover`;
* ``plain-unaided``: the same service without it (Kafka's committed offsets only);
* ``kip848``: the group on ``group.protocol=consumer``: ``A`` and a service with the helper.

``revocation`` is reached when the next owner (for ``restart``, a member that joins and
leaves) joins the group; ``leave`` when ``A`` is asked to stop. For the points between the
sink's commit and the Kafka commit (:data:`WINDOW`) a service joins first and the point is
armed once the group settled, so the kill lands where the docs say the unaided service
repeats a batch, not inside a revocation (whose barrier may commit the batch to Kafka
first). Each cell checks: nothing lost (every acknowledged id is in the table or the
service's output), nothing twice in the table, and nothing in both the table and the
service's output, except for the unaided service after a SIGKILL, which may repeat at most
the one batch that was in the table but not yet in Kafka. The table of outcomes is
docs/guarantees.md's ("Crash points"), and the test fails when the docs say otherwise
(``SPARK_GROUPS_WRITE_DOCS=1`` rewrites it).

Cells run a few at a time (each is mostly waiting: for sessions to expire after a SIGKILL,
for records to be produced); one Spark end-to-end cell per point lives in
``test_crash_points_spark.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_support import join_and_leave

from spark_groups.crash_points import ARM_ENV, CRASH_ENV, POINTS
from spark_groups.handover import SinkTableHandover

from support.broker import broker_kind, unique, wait_until
from support.members import SIM_MEMBER, Member
from support.producers import IdProducer
from support.services import PlainService
from support.tables import sink_commits, table_ids

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "guarantees.md"
SIGNALS = ("SIGTERM", "SIGKILL")
OWNERS = ("restart", "spark", "plain", "plain-unaided", "kip848")
PARTITIONS = 2
MAX_RECORDS = 20  # per batch: the most an unaided service may repeat
RATE = 50  # ids per second: far below what a member reads (~200/s)
CLASSIC = {
    "session.timeout.ms": "3000",
    "heartbeat.interval.ms": "300",
    "partition.assignment.strategy": "range",
}
KIP848 = {"group.protocol": "consumer"}
PARALLEL = int(os.environ.get("CRASH_MATRIX_PARALLEL", "6"))

pytestmark = pytest.mark.skipif(
    broker_kind() != "kafka", reason="KIP-848 and plain consumers in the group (Apache Kafka)"
)


#: Where an unaided service can find a batch in the table that Kafka does not have yet: a
#: SIGKILL after the sink's commit and before the source's Kafka commit.
WINDOW = ("sink.committed", "spark.commit_log")
#: The next owners that are plain consumer services.
SERVICE_OWNERS = ("plain", "plain-unaided", "kip848")


def promise(point: str, sig: str, owner: str) -> str:
    """What docs/guarantees.md promises for a cell: ``exact`` (nothing lost, nothing twice
    in the table, nothing in both the table and a service's output), or for the unaided
    service after a SIGKILL, ``1 batch twice`` (in the window, where the batch is in the
    table and not in Kafka) or ``<= 1 batch twice`` (a revocation, on the member's own
    thread, may meet the main thread inside that window or not)."""
    if owner != "plain-unaided" or sig != "SIGKILL":
        return "exact"
    if point in WINDOW:
        return "1 batch twice"
    return "<= 1 batch twice" if point == "revocation" else "exact"


@dataclass(frozen=True)
class Outcome:
    """What one cell found."""

    lost: int
    twice_in_table: int
    in_both: int
    service_twice: int

    def keeps(self, promised: str) -> bool:
        """Whether this outcome keeps ``promised`` (see :func:`promise`)."""
        if self.lost or self.twice_in_table or self.service_twice:
            return False
        if promised == "exact":
            return self.in_both == 0
        if promised == "1 batch twice":
            return 0 < self.in_both <= MAX_RECORDS
        return self.in_both <= MAX_RECORDS


def commits_by(table: str, member: str) -> int:
    try:
        return sum(1 for c in sink_commits(table) if c["spark_groups.member"] == member)
    except Exception:
        return 0


def run_cell(servers: str, topic: str, point: str, sig: str, owner: str, root: Path) -> Outcome:
    """One cell of the matrix (see the module doc)."""
    root.mkdir(parents=True)
    (root / "logs").mkdir()
    group = unique(f"crash-{owner}")
    settings = KIP848 if owner == "kip848" else CLASSIC
    table = str(root / "table")

    def spec(name: str) -> dict:
        return {
            "servers": servers, "topic": topic, "group": group, "table": table,
            "checkpoint": str(root / f"cp-{name}"),
            "stop_file": str(root / f"stop-{name}"), "kafka": settings, "max_records": MAX_RECORDS,
        }  # fmt: skip

    arm = root / "arm"
    steps: list[tuple[str, float]] = [("start", time.monotonic())]

    def step(name: str) -> None:
        steps.append((name, time.monotonic()))
        (root / "steps.txt").write_text("\n".join(f"{n} {t - steps[0][1]:.2f}" for n, t in steps))

    a = Member("A", spec("A"), root / "logs", SIM_MEMBER)
    others: list[Member] = []
    services: list[PlainService] = []
    producer = IdProducer(servers, topic, PARTITIONS, per_second=RATE)
    producer.start()
    try:
        a.start({CRASH_ENV: f"{point}:{sig}", ARM_ENV: str(arm)})
        wait_until(
            lambda: commits_by(table, "A") >= 2,
            60,
            f"A to commit two batches\n{a.log_text()[-3000:]}",
        )
        step("two commits")
        # In the window, the kill must not meet a revocation: the barrier would commit the
        # batch to Kafka itself once the table holds it (group.durable), racing the kill, and
        # the unaided service would then find nothing twice. So the service joins first and
        # A commits twice more on its new assignment before the point is armed.
        settle_first = point in WINDOW and owner in SERVICE_OWNERS
        if not settle_first:
            arm.touch()
        if owner in ("spark",):
            others.append(Member("B", spec("B"), root / "logs", SIM_MEMBER))
            others[-1].start()
        elif owner in SERVICE_OWNERS:
            helper = None if owner == "plain-unaided" else SinkTableHandover(table, group)
            services.append(PlainService(servers, topic, group, settings, helper))
            services[-1].start()
        if settle_first:
            service = services[-1]
            wait_until(
                lambda: any(e["event"] == "assigned" and e["partitions"] for e in service.events),
                60,
                f"the service's partitions\n{a.log_text()[-3000:]}",
            )
            before = commits_by(table, "A")
            wait_until(
                lambda: commits_by(table, "A") >= before + 2,
                60,
                f"A to commit twice on its new assignment\n{a.log_text()[-3000:]}",
            )
            step("settled")
            arm.touch()
        elif point == "revocation":  # restart: a member joins and leaves, so A revokes
            fired = root / "arm.fired"
            join_and_leave(servers, topic, group, settings, fired.exists)
        if point == "leave":
            Path(a.spec["stop_file"]).touch()
        wait_until(
            lambda: (root / "arm.fired").exists(),
            60,
            f"the crash point {point}\n{a.log_text()[-3000:]}",
        )
        try:
            a.wait(60)
        except AssertionError:  # its threads' stacks into its log, to tell where it hung
            a.signal(signal.SIGUSR1, group=False)
            with contextlib.suppress(AssertionError):
                wait_until(lambda: "most recent call first" in a.log_text(), 10, poll_s=0.2)
            raise AssertionError(f"A did not exit\n{a.log_text()[-6000:]}") from None
        step("crashed")
        a.reap()  # whatever is left of its process group
        if owner == "restart":
            Path(a.spec["stop_file"]).unlink(missing_ok=True)
            a.start()
        after = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= after + RATE, 30, "more records")
        producer.stop_event.set()
        producer.join(30)
        step("produced")
        produced = set(producer.acked)

        def handled() -> set[int]:
            got = set(table_ids(table)) if Path(table, "_delta_log").exists() else set()
            return got.union(*(s.ids for s in services))

        wait_until(
            lambda: handled() >= produced,
            90,
            f"every id handled ({point} {sig} {owner})\n{a.log_text()[-4000:]}",
        )
        step("handled")
        for s in services:
            s.stop_event.set()
            s.join(30)
            assert s.error is None, s.error
    finally:
        producer.stop_event.set()
        for s in services:
            s.stop_event.set()
        for member in [a, *others]:
            member.stop()
        step("stopped")
    in_table = Counter(table_ids(table))
    served = Counter(i for s in services for i in s.ids)
    lost = produced - set(in_table) - set(served)
    both = set(in_table) & set(served)
    # On disk too: a failed run's summary can be lost (a killed CI job), its cells are not.
    (root / "outcome.txt").write_text(
        f"lost {sorted(lost)}\ntwice in the table {[i for i, n in in_table.items() if n > 1]}"
        f"\nin both {sorted(both)}\nserved twice {[i for i, n in served.items() if n > 1]}\n"
    )
    return Outcome(
        lost=len(lost),
        twice_in_table=sum(1 for n in in_table.values() if n > 1),
        in_both=len(both),
        service_twice=sum(1 for n in served.values() if n > 1),
    )


def render(results: dict[tuple[str, str, str], Outcome]) -> str:
    """The docs table of a run whose every cell kept its promise: one row per point and
    signal, one column per next owner."""
    lines = [
        "| crash point | signal | " + " | ".join(OWNERS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in OWNERS) + " |",
    ]
    for point in POINTS:
        for sig in SIGNALS:
            cells = [
                promise(point, sig, owner) for owner in OWNERS if (point, sig, owner) in results
            ]
            lines.append(f"| `{point}` | {sig} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


START, END = "<!-- crash-matrix:start -->", "<!-- crash-matrix:end -->"


def test_every_crash_point_every_signal_every_next_owner(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    cells = [(p, s, o) for p in POINTS for s in SIGNALS for o in OWNERS]
    only = os.environ.get("CRASH_MATRIX_ONLY")  # e.g. "sink.committed" while debugging
    if only:
        cells = [c for c in cells if c[0] in only.split(",")]
    topics = {c: make_topic(PARTITIONS) for c in cells}
    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {
            c: pool.submit(run_cell, bootstrap_servers, topics[c], *c, tmp_path / "-".join(c))
            for c in cells
        }
        results = {c: f.result() for c, f in futures.items()}
    took = time.monotonic() - started
    broken = {c: (promise(*c), o) for c, o in results.items() if not o.keeps(promise(*c))}
    assert not broken, broken
    if only:
        return
    table = render(results)
    text = DOC.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    documented = text[start:end].strip()
    if os.environ.get("SPARK_GROUPS_WRITE_DOCS") == "1":
        DOC.write_text(f"{text[:start]}\n{table}\n{text[end:]}")
    else:
        assert documented == table, f"docs/guarantees.md's crash matrix is not this run's:\n{table}"
    print(f"{len(cells)} cells in {took:.0f} s")
