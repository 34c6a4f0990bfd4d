"""A group of simulated members on one delta-group table: the pieces of the scale scenarios.

The members are ``tests/support/programs/sim_member.py`` processes: the product's driver,
read path, task files and sink commit, without Spark's JVM (Spark adds nothing to what these
scenarios measure: the group, the table's log, the commits). Each appends one JSON line of
timings per batch to its stats file (:class:`SimGroup.batches`).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from bench.harness.kafka import percentile
from spark_groups.storage.files import location

from support.members import SIM_MEMBER, Member
from support.tables import table_ids


class SimGroup:
    """``count`` simulated members of ``group`` reading ``topic`` into ``table`` (with
    delta-rs ``storage`` options), each with its own checkpoint and stats file under
    ``scratch``; ``extra`` goes into every member's spec (``trigger_s``, ``kafka``, ...)."""

    def __init__(
        self, servers: str, topic: str, group: str, table: str, scratch: Path, count: int,
        storage: Mapping[str, str] | None = None, **extra: Any,
    ) -> None:  # fmt: skip
        self.scratch, self.table, self.storage = scratch, table, dict(storage or {})
        (scratch / "logs").mkdir(parents=True, exist_ok=True)
        self.stop_file = scratch / "stop"
        base = {"servers": servers, "topic": topic, "group": group, "table": table,
                "stop_file": str(self.stop_file), "storage": self.storage, **extra}  # fmt: skip
        own = [{"checkpoint": str(scratch / f"cp-{i:02d}"),
                "stats": str(scratch / f"s-{i:02d}.jsonl")} for i in range(count)]  # fmt: skip
        self.members = [Member(f"m{i:02d}", {**base, **own[i]}, scratch / "logs", SIM_MEMBER)
                        for i in range(count)]  # fmt: skip
        self.started_at: dict[str, float] = {}

    def start(self, stagger_s: float = 0.0) -> None:
        """Start every member, ``stagger_s`` apart."""
        for member in self.members:
            self.started_at[member.name] = time.time()
            member.start()
            time.sleep(stagger_s)

    def stop(self) -> list[str]:
        """Ask every member to stop and wait; the members that exited with an error (a
        failed batch ends its member), with their exit codes."""
        self.stop_file.touch()
        failed = []
        for member in self.members:
            try:
                code = member.wait(180)
            except AssertionError:  # its threads' stacks to its log (faulthandler), then killed
                member.signal(signal.SIGUSR1, group=False)
                code = None
            if code != 0:
                failed.append(f"{member.name} exited with {code}")
            member.kill()
            member.reap()
        return failed

    def batches(self) -> list[dict[str, Any]]:
        """Every batch of every member so far, with ``member``, oldest first."""
        rows = []
        for member in self.members:
            path = Path(member.spec["stats"])
            lines = path.read_text().splitlines() if path.exists() else []
            rows += [{"member": member.name, **json.loads(x)} for x in lines if x.strip()]
        return sorted(rows, key=lambda r: r["t"])

    def failures(self) -> list[str]:
        """The members' logged errors (a failed batch ends its member with one), one line
        each."""
        out = []
        for member in self.members:
            for line in member.log_text().splitlines():
                if " ERROR " in line or line.startswith("Traceback"):
                    out.append(f"{member.name}: {line[:300]}")
        return out

    def commit_errors(self) -> int:
        """Commits that failed, were not in the table and were tried again."""
        return sum(
            m.log_text().count("the commit failed and is not in the table") for m in self.members
        )

    def first_batch_s(self) -> list[float]:
        """Per member, seconds from its start to its first committed batch with rows."""
        first: dict[str, float] = {}
        for row in self.batches():
            if row["rows"] and row["member"] not in first:
                first[row["member"]] = row["t"] - self.started_at[row["member"]]
        return sorted(first.values())


def in_topics(servers: str, topics: list[str], partitions: int) -> int:
    """How many records the topics hold (each with ``partitions`` partitions): the sum of
    their log ends, as the broker answers ListOffsets (what every-record-once counts
    against, rather than what a producer believes it sent)."""
    admin = AdminClient({"bootstrap.servers": servers})
    wanted = {TopicPartition(t, p): OffsetSpec.latest() for t in topics for p in range(partitions)}
    return sum(f.result(timeout=60).offset for f in admin.list_offsets(wanted).values())


def table_rows(table: str, storage: Mapping[str, str]) -> int:
    """How many rows the table holds now (0 while there is none)."""
    try:
        return DeltaTable(table, storage_options=dict(storage) or None).count()
    except TableNotFoundError:
        return 0


def commit_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The sink commits of ``rows`` (batches): p50/p99/max, retried ones, per second."""
    if not rows:
        return {"batches": 0}
    commits = [r["commit_ms"] for r in rows]
    # delta-rs writes a checkpoint after every 100th version, in that commit's call.
    checkpointing = [r["commit_ms"] for r in rows if r["version"] and r["version"] % 100 == 0]
    span = rows[-1]["t"] - rows[0]["t"]
    p50s = {f"{k}_p50_ms": round(percentile([r[f"{k}_ms"] for r in rows], 0.5), 1)
            for k in ("task", "plan", "durable", "cpu")}  # fmt: skip
    return {
        "batches": len(rows),
        "batches_per_s": round(len(rows) / span, 2) if span > 0 else None,
        "commit_p50_ms": round(percentile(commits, 0.5), 1),
        "commit_p99_ms": round(percentile(commits, 0.99), 1),
        "commit_max_ms": round(max(commits), 1),
        **p50s,
        "checkpointing_commit_p50_ms": round(percentile(checkpointing, 0.5), 1)
        if checkpointing
        else None,
        "retried": sum(1 for r in rows if r["attempts"] > 1),
        "attempts_max": max(r["attempts"] for r in rows),
    }


def every_record_once(table: str, storage: Mapping[str, str], sent: int) -> dict[str, int]:
    """What the table holds of ids ``0 .. sent-1`` (one per offset: the producer is
    idempotent): missing, duplicated, unexpected; and the (topic, partition, offset) held
    more than once."""
    counts = Counter(table_ids(table, storage or None))
    dt = DeltaTable(table, storage_options=dict(storage) or None)
    twice = (
        QueryBuilder()
        .register("t", dt)
        .execute(
            'SELECT count(*) AS n FROM (SELECT topic, partition, "offset" FROM t '
            'GROUP BY topic, partition, "offset" HAVING count(*) > 1)'
        )
    )
    return {
        "sent": sent,
        "rows": sum(counts.values()),
        "missing": sum(1 for i in range(sent) if i not in counts),
        "duplicated": sum(1 for c in counts.values() if c > 1),
        "unexpected": sum(1 for i in counts if not 0 <= i < sent),
        "offsets_twice": int(pa.table(twice.read_all()).column("n")[0].as_py()),
    }


def log_facts(table: str, storage: Mapping[str, str]) -> dict[str, Any]:
    """The table's ``_delta_log``: commits, their bytes, the newest checkpoint's bytes."""
    log = location(f"{table}/_delta_log", storage or None)
    infos = log.fs.get_file_info(pafs.FileSelector(log.path, allow_not_found=True))
    commits = [i for i in infos if i.path.endswith(".json")]
    checkpoints = sorted(
        (i for i in infos if ".checkpoint" in i.path), key=lambda i: int(Path(i.path).name[:20])
    )
    at_checkpoint = None
    if checkpoints:  # the live files the newest checkpoint lists
        version = int(Path(checkpoints[-1].path).name[:20])
        dt = DeltaTable(table, version=version, storage_options=dict(storage) or None)
        at_checkpoint = dt.get_add_actions().num_rows
    return {
        "checkpoint_files": at_checkpoint,
        "commits": len(commits),
        "commit_bytes_avg": round(sum(i.size for i in commits) / max(1, len(commits))),
        "checkpoints": len(checkpoints),
        "checkpoint_bytes": checkpoints[-1].size if checkpoints else 0,
        "checkpoint_version": int(Path(checkpoints[-1].path).name[:20]) if checkpoints else None,
    }
