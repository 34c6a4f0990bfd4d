"""What landed in a sink table and what a checkpoint has still to do, as the tests and the
benchmarks read them back (delta-rs and the log files, no Spark)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, QueryBuilder

from spark_groups.offsets import OffsetRange
from spark_groups.sink.plan import read_batch_plan
from spark_groups.storage.checkpoint import is_committed
from spark_groups.storage.files import location


def table_ids(table: Path | str, storage_options: Mapping[str, str] | None = None) -> list[int]:
    """Every id in the newest version of the table (duplicates kept), via delta-rs."""
    dt = DeltaTable(str(table), storage_options=storage_options)
    reader = QueryBuilder().register("t", dt).execute("SELECT id FROM t")
    return pa.table(reader.read_all()).column("id").to_pylist()


#: The commit info of each sink commit read so far, by log file (the files never change).
_COMMIT_INFOS: dict[str, dict | None] = {}


def sink_commits(table: Path | str, storage_options: Mapping[str, str] | None = None) -> list[dict]:
    """The commit info of every sink commit in the table's log (local or on S3), oldest
    first; read directly from the log files, each once: cheap enough to poll."""
    log = location(f"{table}/_delta_log", storage_options)
    selector = pafs.FileSelector(log.path, allow_not_found=True)
    names = sorted(i.path for i in log.fs.get_file_info(selector) if i.path.endswith(".json"))
    out = []
    for name in names:
        key = f"{table}::{name}"
        if key not in _COMMIT_INFOS:
            try:
                first = json.loads(log.read_text(name).splitlines()[0])
            except (OSError, ValueError, IndexError):
                continue  # being written
            info = first.get("commitInfo", {})
            _COMMIT_INFOS[key] = info if "spark_groups.ranges" in info else None
        if _COMMIT_INFOS[key] is not None:
            out.append(_COMMIT_INFOS[key])
    return out


def reading_commits(table: str, member: str) -> int:
    """How many of ``member``'s sink commits wrote records."""
    return sum(
        1
        for c in sink_commits(table)
        if c["spark_groups.member"] == member
        and any(json.loads(c.get("spark_groups.ranges", "{}")).values())
    )


def unfinished_batch(checkpoint: str) -> list[OffsetRange]:
    """The ranges of the newest batch in a (local) checkpoint's offset log that Spark has not
    marked finished: what the query replays when it starts again ([] when none)."""
    ids = sorted(int(p.name) for p in (Path(checkpoint) / "offsets").glob("*") if p.name.isdigit())
    if not ids or is_committed(checkpoint, ids[-1]):
        return []
    return list(read_batch_plan(checkpoint, ids[-1]).ranges.values())


def files_holding(root: Path, secrets: list[str]) -> list[str]:
    """Files under ``root`` whose bytes hold one of ``secrets`` (logs, JSON, Parquet pages)."""
    return [
        str(path)
        for path in sorted(p for p in root.rglob("*") if p.is_file())
        if any(s.encode() in path.read_bytes() for s in secrets)
    ]
