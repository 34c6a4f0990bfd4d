"""Pieces of the rolling scenario (:mod:`bench.scenarios.rolling`): what landed (the sink
table and the plain consumer, each record with when and by whom it was read), and the gaps,
waits, losses and duplicates in it; duplicates split by cause (twice in the table; in the
table and by the plain consumer from a batch a SIGTERM cut short and the restart replayed,
:func:`support.tables.unfinished_batch`; otherwise)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder

from bench.harness.kafka import percentile
from spark_groups.group.history import read_history
from spark_groups.offsets import OffsetRange

from support.members import Member
from support.services import PlainService

#: The members' pipeline: every record with when it was read (per row, on the executor) and
#: by whom.
READ_SQL = (
    "SELECT cast(cast(value AS string) AS long) AS id, topic, partition, offset, "
    "timestamp AS produced_at, "
    "cast(reflect('java.lang.System', 'currentTimeMillis') AS long) AS read_ms, "
    "'{reader}' AS reader FROM source"
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
    member.spec["reader"] = f"{member.name}#{member.runs + 1}"  # a simulated member's
    member.spec["sql"] = READ_SQL.format(reader=member.spec["reader"])
    member.start()


class Reads:
    """Every landed read of one run: per partition, (read at (s), reader), sorted; and each
    record's wait from produced to read."""

    def __init__(self, table: str, service: PlainService | None) -> None:
        t = table_reads(table).to_pydict()
        landed = [
            ("table", i, p, o, ms / 1000, produced / 1000, reader)
            for i, p, o, ms, produced, reader in zip(
                t["id"], t["partition"], t["offset"], t["read_ms"], t["produced_ms"], t["reader"],
                strict=True,
            )
        ]  # fmt: skip
        landed += [("service", *r, "service") for r in (service.reads if service else [])]
        self.ids: list[int] = []
        #: Where each id was handled: ("table" | "service", partition, offset).
        self.handled: dict[int, list[tuple[str, int, int]]] = {}
        by_partition: dict[int, list[tuple[float, str]]] = {}
        self.waits: dict[int, list[tuple[float, float, int]]] = {}
        for where, record_id, p, offset, at, produced, reader in landed:
            self.ids.append(record_id)
            self.handled.setdefault(record_id, []).append((where, p, offset))
            by_partition.setdefault(p, []).append((at, reader))
            self.waits.setdefault(p, []).append((at, at - produced, record_id))
        self.by_partition = {p: sorted(v) for p, v in sorted(by_partition.items())}

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
                max((w for at, w, i in v if since <= at <= until and i not in skip), default=0.0), 3
            )
            for p, v in sorted(self.waits.items())
        }


def wait_quantiles(reads: Reads, since: float, until: float, skip: set[int]) -> dict[str, Any]:
    """The waits from produced (appended, with ``LogAppendTime``) to read of the records read
    in the window but ``skip``: p50, p99, p99.9, max (s); how many, and how many over 10 s."""
    waits = [
        w for v in reads.waits.values() for at, w, i in v if since <= at <= until and i not in skip
    ]
    at = {k: round(percentile(waits, q), 3) if waits else None
          for k, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1))}  # fmt: skip
    return {"records": len(waits), "over_10_s": sum(1 for w in waits if w > 10), **at}


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
    causes = ("in_table_twice", "table_and_service_in_replayed_batch", "table_and_service_other")
    out = dict.fromkeys(causes, 0)
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
