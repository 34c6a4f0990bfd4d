"""A kafka-share query stopped at each crash point of a share batch, with Spark: every record
in the table once.

One member process (``support/programs/sink_member.py`` with ``source=kafka-share``: 2
reading tasks a batch, into the delta-group sink) reads a one-partition topic of a share
group. In each round new records arrive and the member starts with a crash point armed:

* ``read``, ``sink.commit_in_flight``, ``sink.committed``, ``spark.commit_log`` stop the whole
  member with SIGKILL (the driver, the JVM, every Python worker): records acquired and not
  acknowledged come back when their locks run out or the consumers' connections close, the
  member is started again from its checkpoint, and what the table has already is left out;
* ``share.accepting`` kills one Python worker (``:process``) after the table named its task
  attempt and before its ACCEPT: a task killed between its write and its acknowledgement. The
  member lives on; the records come back and are left out of the table.

That every record is also ACCEPTed in the end is checked without kills
(tests/integration/test_share_source.py); after these kills it did not always hold within two
minutes (1 run in 3 left 10 records unacknowledged: docs/share-groups.md, known gaps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_groups.crash_points import ARM_ENV, CRASH_ENV
from spark_groups.sink.share_commit import DUPLICATES_KEY

from support.broker import broker_kind, produce_ids, unique, wait_until
from support.members import Member, member_spec
from support.share import share_group
from support.tables import table_ids

#: The group's acquisition lock (Kafka's least by default): what a killed member held comes
#: back after it.
LOCK_MS = 15_000
#: Deliveries per record before the broker archives it: every round may deliver the first
#: records again (a kill before their ACCEPT), so more than Kafka's default of 5.
DELIVERY_LIMIT = 10
#: (point, how it stops the member), in the order of a batch's life.
ROUNDS = (
    ("read", "SIGKILL"),
    ("sink.commit_in_flight", "SIGKILL"),
    ("sink.committed", "SIGKILL"),
    ("spark.commit_log", "SIGKILL"),
    ("share.accepting", "SIGKILL:process"),
)
PER_ROUND = 40

pytestmark = pytest.mark.skipif(broker_kind() != "kafka", reason="share groups: Apache Kafka")


def share_commits(table: str) -> list[dict]:
    """The commit infos of the table's share commits (local table: read from its log)."""
    out = []
    for path in sorted(Path(table, "_delta_log").glob("*.json")):
        info = json.loads(path.read_text().splitlines()[0]).get("commitInfo", {})
        if DUPLICATES_KEY in info:
            out.append(info)
    return out


def test_each_share_crash_point_every_record_once_in_the_table(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(1)
    group = share_group(
        bootstrap_servers,
        **{
            "share.record.lock.duration.ms": str(LOCK_MS),
            "share.delivery.count.limit": str(DELIVERY_LIMIT),
        },
    )
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, unique("g"), tmp_path, "1 second")
    spec.update(
        group=group,
        source="kafka-share",
        checkpoint=str(tmp_path / "cp"),
        source_options={"tasks": "2", "maxRecordsPerTask": "10"},
    )
    table = spec["table"]
    member = Member("S", spec, logs)
    total = 0
    try:
        for round_, (point, how) in enumerate(ROUNDS):
            produce_ids(bootstrap_servers, topic, range(total, total + PER_ROUND), 1, [5] * 8)
            total += PER_ROUND
            arm = tmp_path / f"arm-{round_}"
            arm.touch()  # armed from the start: the first batch that gets there stops
            assert not member.running
            member.start({CRASH_ENV: f"{point}:{how}", ARM_ENV: str(arm)})
            fired = arm.with_name(arm.name + ".fired")
            wait_until(
                lambda f=fired: f.exists() and bool(f.read_text().split()),
                300,
                f"crash point {point}\n{member.log_text()[-3000:]}",
            )
            assert fired.read_text().split()[0] == point
            if how == "SIGKILL":
                member.wait(120)
                member.reap()
        if not member.running:
            member.start()
        wait_until(
            lambda: (Path(table) / "_delta_log").exists() and len(set(table_ids(table))) >= total,
            300,
            f"all {total} records in the table\n{member.log_text()[-3000:]}",
        )
        # The records committed and never ACCEPTed come back: the member reads them again
        # and leaves them out of the table.
        wait_until(
            lambda: sum(int(c[DUPLICATES_KEY]) for c in share_commits(table)) > 0,
            120,
            "the redelivered records left out of the table",
        )
    finally:
        stop_file.touch()
        member.stop()
    assert sorted(table_ids(table)) == list(range(total)), "a record was lost or written twice"
