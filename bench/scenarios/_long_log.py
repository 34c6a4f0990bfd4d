"""Months of a sink table's commits, written fast in delta-rs' own format (for ``long_run``).

The table starts as the sink makes it (a real ``DeltaSink`` commit of batch 0), then the
history of a member on a ``trigger``-second trigger is written as the log files delta-rs
writes: one ``WRITE`` commit per batch (its ``files`` adds, one transaction id per Kafka
partition, the sink's commit info), copied from the real commit's JSON, at the time the batch
would have committed (the newest ``now``). Under a policy that compacts, every
``compact_every`` versions come the lease's two commits and a compaction's (removes and one
add, as delta-rs' ``optimize`` writes them, copied from a real one), and removed files are
tombstones until ``deleted_retention_s``; log entries older than ``log_retention_s`` that lie
before a checkpoint are not written at all (Delta's rule, which the upkeep's clean-up applies:
``tests/unit/test_sink_upkeep.py``): the log starts at a checkpoint of the state there, made
by delta-rs from that state. The checkpoints after it are delta-rs' own, every
``checkpoint_interval`` versions (under today's policy every ``checkpoint_every`` only: their
listing is one file in a hundred). Data files exist for every file the newest version
references (copies of the real batch's files; compacted files rewritten with their rows).
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from spark_groups.storage.files import Location, location

#: The columns of the simulated query (the sink unit tests' schema).
SCHEMA = pa.schema(
    [("id", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
)
TOPIC = "orders"
#: Compacted files stop being rewritten at this size (delta-rs' default target, 100 MiB).
TARGET_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class Policy:
    """What a table's defaults do: retentions (s), compaction period (versions, 0: never)."""

    name: str
    log_retention_s: float
    deleted_retention_s: float
    compact_every: int
    properties: dict[str, str]
    checkpoint_interval: int = 100


@dataclass
class Live:
    """The files the simulated table references, and its tombstones."""

    small: list[tuple[str, int, int]] = field(default_factory=list)  # path, size, batch
    compacted: list[tuple[str, int, int]] = field(default_factory=list)  # path, bytes, rows
    tombstones: list[tuple[str, int, int]] = field(default_factory=list)  # path, size, ms
    data: dict[str, bytes] = field(default_factory=dict)  # compacted files a reader may read
    now_ms: int | None = None  # when the last build ended, on its clock


class Template:
    """The shapes of the sink's commits, taken from real ones of a scratch table."""

    def __init__(self, batch_commit: list[dict[str, Any]], optimize_commit: list[dict[str, Any]],
                 lease_commit: list[dict[str, Any]], files: list[tuple[str, bytes]],
                 create: list[dict[str, Any]]) -> None:  # fmt: skip
        self.info = next(a["commitInfo"] for a in batch_commit if "commitInfo" in a)
        self.adds = [a["add"] for a in batch_commit if "add" in a]
        self.txn_ids = [a["txn"]["appId"] for a in batch_commit if "txn" in a]
        self.opt_info = next(a["commitInfo"] for a in optimize_commit if "commitInfo" in a)
        self.opt_add = next(a["add"] for a in optimize_commit if "add" in a)
        self.remove = next(a["remove"] for a in optimize_commit if "remove" in a)
        self.lease = lease_commit
        self.files = files  # the batch's data files: (name, bytes), one per Kafka partition
        self.create = create  # the table's version 0: protocol and metadata
        self.rows_per_file = json.loads(self.adds[0]["stats"])["numRecords"]

    def batch(self, batch: int, ms: int) -> list[dict[str, Any]]:
        """The actions of batch ``batch``'s commit at ``ms``."""
        rows = self.rows_per_file
        info = dict(self.info, timestamp=ms)
        info["spark_groups.batch"] = str(batch)
        info["spark_groups.ranges"] = json.dumps(
            {TOPIC: {str(p): [batch * rows, (batch + 1) * rows] for p in range(len(self.adds))}}
        )
        out: list[dict[str, Any]] = [{"commitInfo": info}]
        for p, add in enumerate(self.adds):
            out.append({"add": dict(add, path=small_name(batch, p), modificationTime=ms)})
        out += [{"txn": {"appId": a, "version": (batch + 1) * rows}} for a in self.txn_ids]
        return out

    def lease_commit(self, ms: int) -> list[dict[str, Any]]:
        """A maintenance lease's commit (taken or released) at ``ms``."""
        actions = copy.deepcopy(self.lease)
        for a in actions:
            if "commitInfo" in a:
                a["commitInfo"]["timestamp"] = ms
            if "txn" in a:
                a["txn"]["version"] = ms
        return actions

    def compaction(self, removed: Iterable[tuple[str, int]], added: tuple[str, int, int],
                   ms: int) -> list[dict[str, Any]]:  # fmt: skip
        """A compaction's commit at ``ms``: ``removed`` (path, size) into ``added``."""
        out: list[dict[str, Any]] = [{"commitInfo": dict(self.opt_info, timestamp=ms)}]
        for path, size in removed:
            out.append({"remove": dict(self.remove, path=path, size=size, deletionTimestamp=ms)})
        path, size, rows = added
        stats = json.loads(self.opt_add["stats"])
        stats["numRecords"] = rows
        out.append({"add": dict(self.opt_add, path=path, size=size, modificationTime=ms,
                                stats=json.dumps(stats))})  # fmt: skip
        return out


def small_name(batch: int, partition: int) -> str:
    """The data file of one Kafka partition's rows of one simulated batch."""
    return f"part-sim-{batch:09d}-{partition}.snappy.parquet"


def lines(actions: list[dict[str, Any]]) -> bytes:
    """A commit file's bytes: one JSON action a line."""
    return ("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n").encode()


class TableFiles:
    """Writes below one table on its store, many at once."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None, threads: int) -> None:
        self.where: Location = location(uri, storage_options)
        self.local = uri.split("://")[0] not in ("s3", "az", "abfs", "abfss", "gs")
        self.pool = ThreadPoolExecutor(threads)
        self.pending: list[Any] = []
        self.links: dict[str, int] = {}
        self.sources: dict[str, str] = {}

    def put(self, relative: str, data: bytes) -> None:
        """Write ``relative`` (in the background; :meth:`flush` waits)."""
        self.pending.append(self.pool.submit(self._put, relative, data))
        if len(self.pending) > 2000:
            self.flush()

    def _put(self, relative: str, data: bytes) -> None:
        path = self.where.child(relative)
        if self.local:
            Path(path).write_bytes(data)
            return
        with self.where.fs.open_output_stream(path) as out:
            out.write(data)

    def link(self, relative: str, source: str, data: bytes) -> None:
        """``relative`` with the content of ``source`` (``data``): a hard link on a local disk."""
        if not self.local:
            self.put(relative, data)
            return
        if source not in self.links:  # links made by earlier builds
            self.links[source] = os.stat(self.where.child(source)).st_nlink
        self.links[source] = count = self.links[source] + 1
        # A file takes 65,000 links on ext4: every 60,000th is a copy, the next ones link it.
        if count % 60_000 == 0:
            self._put(relative, data)
            self.sources[source] = relative
            return
        origin = self.where.child(self.sources.get(source, source))
        self.pending.append(self.pool.submit(os.link, origin, self.where.child(relative)))

    def delete(self, relatives: Iterable[str]) -> None:
        """Delete files (in the background)."""
        for r in relatives:
            self.pending.append(self.pool.submit(self.where.fs.delete_file, self.where.child(r)))

    def flush(self) -> None:
        """Wait for every write; raise the first error."""
        for f in self.pending:
            f.result()
        self.pending.clear()

    def names(self, relative: str) -> list[str]:
        """The names in the folder ``relative``."""
        from pyarrow import fs as pafs

        infos = self.where.fs.get_file_info(pafs.FileSelector(self.where.child(relative)))
        return [i.path.rsplit("/", 1)[-1] for i in infos]

    def read(self, relative: str) -> bytes:
        with self.where.fs.open_input_stream(self.where.child(relative)) as stream:
            return stream.read()


def compacted_file(rows: int, first_batch: int) -> bytes:
    """A compacted file's Parquet bytes: ``rows`` rows (ids from ``first_batch``)."""
    ids = pa.array(range(first_batch * 1000, first_batch * 1000 + rows), pa.int64())
    table = pa.table(
        [ids, pa.array([TOPIC] * rows, pa.string()),
         pa.array([0] * rows, pa.int32()), ids],
        schema=SCHEMA,
    )  # fmt: skip
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue().to_pybytes()


@dataclass
class Built:
    """What :func:`build` left: the table's newest version and batch, and its counts."""

    version: int
    next_batch: int
    log_entries: int
    live_files: int
    tombstones: int
    seconds: float


def build(uri: str, storage_options: dict[str, str] | None, template: Template, policy: Policy,
          start_version: int, start_batch: int, commits: int, trigger_s: float,
          live: Live, threads: int = 16, checkpoint_every: int = 10_000) -> Built:  # fmt: skip
    """Write ``commits`` more versions after ``start_version`` (the table as it is), the
    newest now; ``live`` is the simulated state, brought up to date. See the module doc."""
    started = time.monotonic()
    files = TableFiles(uri, storage_options, threads)
    end = start_version + commits
    now_ms = int(time.time() * 1000)
    # Versions and their times: batches advance the clock, maintenance commits do not.
    plan: list[tuple[int, str, int]] = []  # version, kind, batch
    batch, version = start_batch, start_version
    while version < end:
        version += 1
        plan.append((version, "batch", batch))
        batch += 1
        if policy.compact_every and version % policy.compact_every == 0:
            for kind in ("lease", "compact", "lease"):
                version += 1
                plan.append((version, kind, batch - 1))
    batches_total = batch - start_batch

    def ms_of(b: int) -> int:
        return now_ms - int((start_batch + batches_total - 1 - b) * trigger_s * 1000)

    if live.now_ms is not None:  # the last build's history ends where this one's starts
        shift = ms_of(start_batch) - int(trigger_s * 1000) - live.now_ms
        live.tombstones = [(p, s, ms + shift) for p, s, ms in live.tombstones]
    live.now_ms = now_ms
    keep_from = _first_kept(plan, policy, ms_of, now_ms, start_version)
    based = keep_from > start_version + 1
    if based:
        _base_checkpoint(files, template, policy, plan, keep_from, ms_of, live)
    for version, kind, b in plan:
        if based and version <= keep_from:
            continue
        actions = _advance(template, policy, live, kind, b, ms_of(b), version >= keep_from, True)
        if version >= keep_from:
            files.put(f"_delta_log/{version:020d}.json", lines(actions))
        if version > keep_from and _checkpoint_here(version, policy, checkpoint_every, end):
            files.flush()
            table = DeltaTable(uri, storage_options=storage_options)
            table.load_as_version(version)
            table.create_checkpoint()
    files.flush()
    live_files = len(live.small) + len(live.compacted)
    _write_live_data(files, template, live, policy, start_batch)
    files.flush()
    entries = len(files.names("_delta_log"))
    cutoff = now_ms - int(policy.deleted_retention_s * 1000)
    return Built(end, batch, entries, live_files, sum(1 for t in live.tombstones if t[2] >= cutoff),
                 time.monotonic() - started)  # fmt: skip


def _checkpoint_here(version: int, policy: Policy, every: int, end: int) -> bool:
    interval = policy.checkpoint_interval
    if version % interval != 0:
        return False
    if policy.compact_every:  # a table that stays small: every checkpoint, as delta-rs does
        return True
    return version % every == 0 or version > end - interval


def _first_kept(plan: list[tuple[int, str, int]], policy: Policy, ms_of: Any, now_ms: int,
                start_version: int) -> int:  # fmt: skip
    """The first version whose log file is kept: the newest checkpoint at or before the first
    version younger than the log retention (every younger version stays loadable)."""
    cutoff = now_ms - int(policy.log_retention_s * 1000)
    young = next((v for v, _k, b in plan if ms_of(b) > cutoff), plan[-1][0])
    base = young - young % policy.checkpoint_interval
    return max(base, start_version + 1)


def _advance(template: Template, policy: Policy, live: Live, kind: str, batch: int, ms: int,
             written: bool, exact: bool) -> list[dict[str, Any]]:  # fmt: skip
    """The actions of one version; ``live`` brought past it. A compacted file a reader may
    read (``exact``, or one too big to be compacted again) is made, so its size is its own."""
    if kind == "batch":
        for p, add in enumerate(template.adds):
            live.small.append((small_name(batch, p), add["size"], batch))
        return template.batch(batch, ms) if written else []
    if kind == "lease":
        return template.lease_commit(ms) if written else []
    cutoff = ms - int(policy.deleted_retention_s * 1000)
    live.tombstones = [t for t in live.tombstones if t[2] >= cutoff]
    merged = [c for c in live.compacted if not full(c[2])]
    removed = [(p, s) for p, s, _b in live.small] + [(p, s) for p, s, _r in merged]
    rows = len(live.small) * template.rows_per_file + sum(r for _p, _s, r in merged)
    # A compacted file's bytes: about 9 per row of these columns (snappy), at least a footer.
    size, path = max(1500, rows * 9), f"part-compacted-{batch:09d}.snappy.parquet"
    if exact or full(rows):
        live.data[path] = compacted_file(rows, 0)
        size = len(live.data[path])
    added = (path, size, rows)
    for p, _s in removed:
        live.data.pop(p, None)
    live.tombstones += [(p, s, ms) for p, s in removed]
    live.small = []
    live.compacted = [c for c in live.compacted if full(c[2])] + [added]
    return template.compaction(removed, added, ms) if written else []


def full(rows: int) -> bool:
    """Whether a compacted file of ``rows`` rows is at delta-rs' target size (about 9 bytes a
    row): compactions leave it alone from then on."""
    return rows * 9 >= TARGET_BYTES


def _base_checkpoint(files: TableFiles, template: Template, policy: Policy,
                     plan: list[tuple[int, str, int]], keep_from: int, ms_of: Any,
                     live: Live) -> None:  # fmt: skip
    """The commit file and the checkpoint at ``keep_from``, the checkpoint made by delta-rs
    from the state there (``live`` brought up to it), and the log before it removed."""
    last_batch = -1
    for version, kind, b in plan:
        if version > keep_from:
            break
        exact = version >= keep_from - 2 * policy.compact_every - 3
        actions = _advance(template, policy, live, kind, b, ms_of(b), version == keep_from, exact)
        if version == keep_from:
            files.put(f"_delta_log/{version:020d}.json", lines(actions))
        last_batch = b if kind == "batch" else last_batch
    rows = template.rows_per_file
    state = template.create
    body: list[dict[str, Any]] = [{"commitInfo": dict(template.info, timestamp=ms_of(last_batch))}]
    for path, size, b in live.small:
        body.append(
            {"add": dict(template.adds[0], path=path, size=size, modificationTime=ms_of(b))}
        )
    for path, size, n in live.compacted:
        stats = json.loads(template.opt_add["stats"])
        stats["numRecords"] = n
        add = dict(template.opt_add, path=path, size=size, stats=json.dumps(stats))
        body.append({"add": dict(add, modificationTime=ms_of(last_batch))})
    for path, size, ms in live.tombstones:
        body.append({"remove": dict(template.remove, path=path, size=size, deletionTimestamp=ms)})
    body += [{"txn": {"appId": a, "version": (last_batch + 1) * rows}} for a in template.txn_ids]
    body += [a for a in template.lease_commit(ms_of(last_batch)) if "txn" in a]
    with tempfile.TemporaryDirectory(prefix="long-run-base-") as scratch:
        log = Path(scratch, "_delta_log")
        log.mkdir()
        (log / f"{0:020d}.json").write_bytes(lines(state))
        (log / f"{1:020d}.json").write_bytes(lines(body))
        DeltaTable(scratch).create_checkpoint()
        checkpoint = (log / f"{1:020d}.checkpoint.parquet").read_bytes()
        last = json.loads((log / "_last_checkpoint").read_text())
    old = [n for n in files.names("_delta_log") if n[:20].isdigit() and int(n[:20]) < keep_from]
    files.delete(f"_delta_log/{n}" for n in old)
    files.put(f"_delta_log/{keep_from:020d}.checkpoint.parquet", checkpoint)
    last.update(version=keep_from, size=last.get("size"))
    files.put("_delta_log/_last_checkpoint", json.dumps(last).encode())
    files.flush()


def _write_live_data(files: TableFiles, template: Template, live: Live, policy: Policy,
                     start_batch: int) -> None:  # fmt: skip
    """Write every data file the newest version references and the store lacks (on a local
    disk, links to the real batch's files)."""
    for path, _size, b in live.small:
        if b >= start_batch:
            name, data = template.files[int(path.rsplit("-", 1)[1].split(".")[0])]
            files.link(path, name, data)
    for path, _size, _rows in live.compacted:
        files.put(path, live.data[path])
