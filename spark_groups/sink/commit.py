"""The exactly-once Delta sink, driver side: one Delta commit per batch, fenced per partition.

A ``delta-group`` batch arrives here as the files its tasks wrote (``spark_groups.sink.writer``,
one per Kafka partition) and the batch's plan (``spark_groups.sink.plan``: ``[from, until)``
per Kafka partition, from Spark's checkpoint). :meth:`DeltaSink.commit` turns them into **one**
Delta commit that adds the files and sets one Delta transaction id per Kafka partition, in
the spirit of delta-io/kafka-delta-ingest::

    app id  = spark_groups:<Delta table id>:<topic>:<partition>:<group id>
    version = the next offset of that partition (the batch's ``until``)

So the table itself says, per partition, up to where its rows are complete. Before
committing, each partition of the batch is compared with that version ``v``:

* ``v >= until``: every row is already in the table (a replayed batch, a zombie member):
  the partition's files are dropped; nothing of it is written.
* ``from < v < until``: the rows ``< v`` are in the table: files entirely below ``v`` are
  dropped, files straddling ``v`` are rewritten without those rows (read back from storage by
  the driver; this happens only when two members planned different ranges of a partition),
  and the transaction moves to ``until``.
* ``v < from``: the records ``[v, from)`` are not in the table. When the batch's plan says
  another consumer of the group committed them (a :class:`~spark_groups.offsets.Handover`
  from ``since <= v`` up to exactly ``from``; the source builds it from Kafka's committed
  offset and its metadata), the gap is accounted for: the partition is written and the
  commit info records the range under ``spark_groups.outside``. Any other gap refuses the
  batch with :class:`~spark_groups.errors.SinkGapError` (``failOnGap=false`` logs and writes
  instead).
* no ``v`` (the partition was never written by this group) or ``v == from``: written.

**Compare-and-set.** The versions are read from one snapshot of the table and the commit is
made on that same snapshot. delta-rs fails a commit whose transaction ids were set by any
commit after the snapshot (``CommitFailedError``, "concurrent transaction"), and rebases it
over commits that touched other partitions. On a failure the whole decision is made again
on a fresh snapshot (up to :data:`MAX_COMMIT_ATTEMPTS` times), so two writers can never both
commit the same offsets of a partition.

**Files.** Every file is checked (exists, has the size its task reported) before the
commit; a batch that does not commit (missing file, gap, error, aborted by Spark) has its
files deleted, and dropped or rewritten files are deleted after the commit. A commit that
fails in an unclear way (an error after the log entry may have been written) is resolved by
reading the table back: files are deleted only when they are certainly not in the table.

Nothing here imports Spark: ``spark_groups.sink.spark`` adapts it to Spark's Python data
source API, and everything is tested without a JVM.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa

from spark_groups.delta import create_table, open_table
from spark_groups.errors import SinkError, SinkGapError
from spark_groups.files import location, table_uri
from spark_groups.offsets import Handover, OffsetRange, TopicPartition
from spark_groups.sink.decision import decide
from spark_groups.sink.features import check_table_features
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.writer import DataFile, check_schema, remove_files, rewrite_from

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Prefix of the sink's Delta transaction (``txn``) app ids.
APP_ID_PREFIX = "spark_groups"
#: How many times a commit is decided and tried again after concurrent commits.
MAX_COMMIT_ATTEMPTS = 10
#: Keys of the commit info (``commitInfo``) every sink commit carries.
COMMIT_INFO_KEYS = (
    "spark_groups.batch",
    "spark_groups.group",
    "spark_groups.member",
    "spark_groups.ranges",
    "spark_groups.dropped",
    "spark_groups.outside",
)


def app_id(table_id: str, group_id: str, tp: TopicPartition) -> str:
    """The Delta transaction app id of one partition of one group in one table.

    The group id comes last: topics cannot contain ``:`` and partitions are numbers, so the
    id is unambiguous whatever the group id contains.
    """
    return f"{APP_ID_PREFIX}:{table_id}:{tp.topic}:{tp.partition}:{group_id}"


def committed_positions(
    table_path: str,
    group_id: str,
    partitions: Iterable[TopicPartition],
    storage_options: dict[str, str] | None = None,
) -> dict[TopicPartition, int]:
    """The next offset per partition that the sink table at ``table_path`` holds for
    ``group_id`` (its transaction versions). Partitions never written are absent; a table
    that does not exist yet gives ``{}``.

    This is where a partition should resume when the sink is the furthest ahead (the sink
    commits before the source's ledger and Kafka commits).
    """
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    table = _load(table_uri(table_path), storage_options)
    if table is None:
        return {}
    return _versions(table, group_id, wanted)


def _load(uri: str, storage_options: dict[str, str] | None) -> DeltaTable | None:
    """The table at ``uri`` at its newest version, or None when there is none."""
    try:
        return open_table(uri, storage_options)
    except Exception as exc:
        raise SinkError(f"sink table {uri}: cannot open it: {type(exc).__name__}: {exc}") from exc


def _versions(
    table: DeltaTable, group_id: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    table_id = str(table.metadata().id)
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        version = table.transaction_version(app_id(table_id, group_id, tp))
        if version is not None:
            out[tp] = int(version)
    return out


@dataclass(frozen=True)
class CommitResult:
    """What :meth:`DeltaSink.commit` did with one batch.

    ``version`` is the table version of the commit (None when every partition was already
    in the table and nothing was committed). ``written`` holds, per partition committed, the
    range whose rows went in (it starts later than planned when part of it was already in the
    table); ``dropped`` the partitions whose rows were all in the table already.
    """

    batch_id: int
    version: int | None
    written: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    dropped: tuple[TopicPartition, ...] = ()
    rows: int = 0
    files: int = 0
    attempts: int = 1


class _Unknown(SinkError):
    """A commit failed in a way that leaves it unknown whether it landed."""


@dataclass
class _Decision:
    """The outcome of comparing a batch with one snapshot of the table."""

    keep: list[DataFile] = field(default_factory=list)
    txns: dict[TopicPartition, int] = field(default_factory=dict)
    written: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    dropped: list[TopicPartition] = field(default_factory=list)
    versions: dict[TopicPartition, int] = field(default_factory=dict)
    # Gaps another consumer of the group accounts for: [table's v, from) and who.
    outside: dict[TopicPartition, tuple[int, int, str]] = field(default_factory=dict)


class DeltaSink:
    """The driver side of the ``delta-group`` sink for the table at ``path``.

    ``group_id`` is the consumer group of the source (part of every transaction app id).
    ``partition_by`` are the partition columns for a new table (None: take the existing
    table's, or none); ``merge_schema`` allows adding the query's new columns to the table;
    ``fail_on_gap`` refuses batches that would leave a gap; ``member`` names the writer in
    the commit info. One object may commit many batches, one at a time.
    """

    def __init__(
        self,
        path: str,
        group_id: str,
        *,
        storage_options: dict[str, str] | None = None,
        partition_by: Sequence[str] | None = None,
        merge_schema: bool = False,
        fail_on_gap: bool = True,
        member: str = "",
        compression: str = "snappy",
    ) -> None:
        """Describe the sink; nothing is read or written until a method is called."""
        self.path = path
        self.uri = table_uri(path)
        self.group_id = group_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.partition_by = tuple(partition_by) if partition_by is not None else None
        self.merge_schema = merge_schema
        self.fail_on_gap = fail_on_gap
        self.member = member
        self.compression = compression

    def __repr__(self) -> str:
        return f"DeltaSink(path={self.path!r}, group_id={self.group_id!r})"

    # ------------------------------------------------------------------ public API

    def table_partition_columns(self) -> tuple[str, ...] | None:
        """The existing table's partition columns, or None when there is no table yet."""
        table = _load(self.uri, self.storage_options)
        if table is None:
            return None
        return tuple(table.metadata().partition_columns)

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The table's next offset per partition for this group (see
        :func:`committed_positions`)."""
        return committed_positions(self.uri, self.group_id, partitions, self.storage_options)

    def abort(self, files: Iterable[DataFile]) -> None:
        """Delete the files of a batch that will not be committed."""
        paths = [f.path for f in files]
        if paths:
            deleted = remove_files(self.uri, paths, self.storage_options)
            log.info("sink %s: deleted %d file(s) of an aborted batch", self.path, deleted)

    def commit(self, plan: BatchPlan, files: Sequence[DataFile], schema: pa.Schema) -> CommitResult:
        """Commit one batch: ``files`` (written by its tasks) under ``plan``, in one Delta
        commit with one transaction id per partition written. ``schema`` is the query's.

        Raises :class:`~spark_groups.errors.SinkError` (nothing committed, the batch's files
        deleted) for files outside the plan or missing, an incompatible table, a gap
        (:class:`~spark_groups.errors.SinkGapError`), or concurrent commits that kept winning.
        """
        files = list(files)
        made: set[str] = set()  # files the driver wrote (rewrites)
        try:
            self._check_against_plan(plan, files)
            self._check_exist(files)
            partition_by = self._partition_by_for(files)
            check_schema(schema, partition_by)
        except SinkError:
            self.abort(files)
            raise
        rewrites: dict[tuple[str, int], DataFile | None] = {}
        attempt = 0
        while True:
            attempt += 1
            try:
                table = self._open(schema, partition_by)
                decision = self._decide(table, plan, files, rewrites, made)
            except SinkError:
                self._cleanup(files, made, keep=())
                raise
            except Exception as exc:
                self._cleanup(files, made, keep=())
                raise SinkError(
                    f"sink {self.path}: batch {plan.batch_id}: {type(exc).__name__}: {exc}"
                ) from exc
            if not decision.txns:
                self._cleanup(files, made, keep=())
                log.info(
                    "sink %s: batch %d already in the table for every partition (%s); nothing "
                    "committed",
                    self.path,
                    plan.batch_id,
                    _tp_list(decision.dropped),
                )
                return CommitResult(
                    plan.batch_id, None, dropped=tuple(decision.dropped), attempts=attempt
                )
            self._before_commit(attempt, table, decision)
            try:
                outcome = self._try_commit(table, plan, decision, schema, partition_by)
            except _Unknown:
                raise  # the files may be in the table: keep them
            except SinkError:
                self._cleanup(files, made, keep=())
                raise
            if outcome == "conflict":
                if attempt >= MAX_COMMIT_ATTEMPTS:
                    self._cleanup(files, made, keep=())
                    raise SinkError(
                        f"sink {self.path}: batch {plan.batch_id} failed {attempt} times on "
                        "concurrent commits to the same partitions; nothing committed"
                    )
                delay = random.uniform(0.0, min(1.0, 0.02 * 2**attempt))
                log.info(
                    "sink %s: batch %d met a concurrent commit (attempt %d); deciding again "
                    "in %.0f ms",
                    self.path,
                    plan.batch_id,
                    attempt,
                    delay * 1000,
                )
                time.sleep(delay)
                continue
            version = self._version_of(plan, decision)
            self._cleanup(files, made, keep={f.path for f in decision.keep})
            rows = sum(f.rows for f in decision.keep)
            log.info(
                "sink %s: batch %d committed as version %s: %d row(s) in %d file(s), ranges %s%s",
                self.path,
                plan.batch_id,
                version,
                rows,
                len(decision.keep),
                _ranges_text(decision.written),
                f"; already in the table: {_tp_list(decision.dropped)}" if decision.dropped else "",
            )
            return CommitResult(
                batch_id=plan.batch_id,
                version=version,
                written=dict(decision.written),
                dropped=tuple(decision.dropped),
                rows=rows,
                files=len(decision.keep),
                attempts=attempt,
            )

    # ------------------------------------------------------------------ checks

    def _check_against_plan(self, plan: BatchPlan, files: Sequence[DataFile]) -> None:
        """Every file's rows must lie in the planned range of their partition."""
        for f in files:
            planned = plan.ranges.get(f.topic_partition)
            if planned is None:
                raise SinkError(
                    f"sink {self.path}: batch {plan.batch_id} has rows of {f.topic_partition}, "
                    "which the batch did not read. Every row must come from a record of the "
                    "same micro-batch (stateful operators that emit rows of earlier batches, "
                    "and other sources, are not supported)"
                )
            if f.min_offset < planned.from_offset or f.max_offset >= planned.until_offset:
                raise SinkError(
                    f"sink {self.path}: batch {plan.batch_id} has rows of {f.topic_partition} "
                    f"at offsets {f.min_offset}..{f.max_offset}, outside the batch's range "
                    f"[{planned.from_offset}, {planned.until_offset}). Every row must keep the "
                    "offset of the record it came from, read in the same micro-batch"
                )
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise SinkError(f"sink {self.path}: batch {plan.batch_id} lists a file twice")

    def _check_exist(self, files: Sequence[DataFile]) -> None:
        """Every file must exist with the size its task reported (before any commit)."""
        if not files:
            return
        where = location(self.uri, self.storage_options)
        infos = where.fs.get_file_info([where.child(f.path) for f in files])
        problems = []
        for f, info in zip(files, infos, strict=True):
            if info.size is None or info.type.name != "File":
                problems.append(f"{f.path} is missing")
            elif info.size != f.size:
                problems.append(f"{f.path} has {info.size} bytes, its task wrote {f.size}")
        if problems:
            shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
            raise SinkError(
                f"sink {self.path}: {len(problems)} data file(s) of the batch are not as "
                f"written: {shown}. Nothing was committed"
            )

    # ------------------------------------------------------------------ the table

    def _partition_by_for(self, files: Sequence[DataFile]) -> tuple[str, ...]:
        """The partition columns: the option's, else the table's, else none; and the ones the
        files were written for, which must agree (the table may have been created by another
        writer after the tasks ran)."""
        if self.partition_by is not None:
            wanted = self.partition_by
        else:
            existing = self.table_partition_columns()
            wanted = existing if existing is not None else ()
        for f in files:
            if tuple(f.partition_values) != wanted:
                raise SinkError(
                    f"sink {self.path}: data file {f.path} was written for partition columns "
                    f"{list(f.partition_values)}, the table is partitioned by {list(wanted)} "
                    "(was it created by another writer meanwhile?)"
                )
        return wanted

    def _open(self, schema: pa.Schema, partition_by: tuple[str, ...]) -> DeltaTable:
        """The table at its newest version (created when missing), with the query's columns."""
        table = _load(self.uri, self.storage_options)
        if table is None:
            table = self._create(schema, partition_by)
        check_table_features(table, self.path)
        actual = tuple(table.metadata().partition_columns)
        if actual != partition_by:
            raise SinkError(
                f"sink {self.path}: the table is partitioned by {list(actual)}, the query by "
                f"{list(partition_by)} (option partitionBy; a table's partition columns cannot "
                "change)"
            )
        added = self._new_columns(table, schema)
        if added:
            table.alter.add_columns(added)
            log.info(
                "sink %s: added column(s) %s (mergeSchema)",
                self.path,
                ", ".join(f.name for f in added),
            )
            table = _load(self.uri, self.storage_options)
            assert table is not None
        return table

    def _create(self, schema: pa.Schema, partition_by: tuple[str, ...]) -> DeltaTable:
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        error = create_table(
            self.uri,
            nullable,
            partition_by=partition_by,
            description="written by the spark_groups delta-group sink",
            storage_options=self.storage_options,
        )
        if error is None:
            log.info(
                "sink %s: created the table (partitioned by %s)", self.path, list(partition_by)
            )
        else:
            log.info("sink %s: create failed (%s); opening the table there", self.path, error)
        table = _load(self.uri, self.storage_options)
        if table is None:
            raise SinkError(f"sink {self.path}: could not create the Delta table: {error}")
        return table

    def _new_columns(self, table: DeltaTable, schema: pa.Schema) -> list[Any]:
        """Check the query's columns against the table's; return the columns to add."""
        from deltalake import Field, Schema

        existing = {f["name"]: f for f in json.loads(table.schema().to_json())["fields"]}
        query = Schema.from_arrow(schema)
        query_fields = {f["name"]: f for f in json.loads(query.to_json())["fields"]}
        added = []
        for field_ in query.fields:
            mine = query_fields[field_.name]
            theirs = existing.get(field_.name)
            if theirs is None:
                if not self.merge_schema:
                    raise SinkError(
                        f"sink {self.path}: the query has a column {field_.name!r} that the table "
                        "does not; set the sink option mergeSchema=true to add it (as nullable)"
                    )
                added.append(Field(field_.name, field_.type, nullable=True))
                continue
            if mine["type"] != theirs["type"]:
                raise SinkError(
                    f"sink {self.path}: column {field_.name!r} is "
                    f"{json.dumps(theirs['type'])} in the table and {json.dumps(mine['type'])} in "
                    "the query; only new nullable columns can be added"
                )
            if mine["nullable"] and not theirs["nullable"]:
                raise SinkError(
                    f"sink {self.path}: column {field_.name!r} is NOT NULL in the table but "
                    "nullable in the query"
                )
        for name, theirs in existing.items():
            if name not in query_fields and not theirs["nullable"]:
                raise SinkError(
                    f"sink {self.path}: the query has no column {name!r}, which is NOT NULL in "
                    "the table"
                )
        return added

    # ------------------------------------------------------------------ deciding

    def _decide(
        self,
        table: DeltaTable,
        plan: BatchPlan,
        files: Sequence[DataFile],
        rewrites: dict[tuple[str, int], DataFile | None],
        made: set[str],
    ) -> _Decision:
        """Compare the batch with the table's transaction versions (one snapshot)."""
        decision = _Decision()
        by_tp: dict[TopicPartition, list[DataFile]] = {}
        for f in files:
            by_tp.setdefault(f.topic_partition, []).append(f)
        versions = _versions(table, self.group_id, plan.ranges)
        decision.versions = versions
        gaps = []
        for tp, choice in decide(plan, versions).items():
            planned = plan.ranges[tp]
            if choice.action == "drop":
                decision.dropped.append(tp)
                continue
            if choice.action == "gap":  # refused below unless failOnGap=false writes it
                assert choice.version is not None  # a gap is always below a known version
                gaps.append((tp, choice.version, planned))
            mine = by_tp.get(tp, [])
            if choice.start > planned.from_offset:  # the rows below it are in the table
                mine = self._cut(mine, choice.start, rewrites, made)
            if choice.outside is not None:
                decision.outside[tp] = choice.outside
            decision.keep.extend(mine)
            decision.txns[tp] = planned.until_offset
            decision.written[tp] = OffsetRange(
                tp.topic, tp.partition, choice.start, planned.until_offset
            )
        for tp, (v, until, by) in decision.outside.items():
            log.info(
                "sink %s: batch %d: %s [%d, %d) was committed by %s, outside this table; "
                "recorded as such",
                self.path,
                plan.batch_id,
                tp,
                v,
                until,
                by,
            )
        if gaps:
            text = "; ".join(
                f"{tp}: the table holds offsets up to {v}, the batch starts at {r.from_offset}"
                + _gap_origin(plan.outside.get(tp), v)
                for tp, v, r in gaps
            )
            commands = "; ".join(
                f"spark-groups accept-gap {self.group_id} --sink-table {self.path} "
                f"--partition {tp.topic}:{tp.partition} --until {r.from_offset}"
                for tp, v, r in gaps
            )
            if self.fail_on_gap:
                raise SinkGapError(
                    f"sink {self.path}: batch {plan.batch_id} would leave a gap: {text}. No "
                    "other consumer of the group is known to have committed those records "
                    "(were they lost to retention, skipped by at-most-once, or was the table "
                    "restored?). Nothing was committed, and every member would fail the same "
                    "way: to leave the records out of the table, record that decision with "
                    f"{commands} (then restart); to read them instead, reset the group to the "
                    "table's offsets with spark-groups reset. The source option sink.table "
                    "makes members hold such a partition instead of failing",
                    gaps={tp: (v, r.from_offset) for tp, v, r in gaps},
                )
            log.warning(
                "sink %s: batch %d leaves a gap (failOnGap=false): %s",
                self.path,
                plan.batch_id,
                text,
            )
        return decision

    def _cut(
        self,
        files: list[DataFile],
        version: int,
        rewrites: dict[tuple[str, int], DataFile | None],
        made: set[str],
    ) -> list[DataFile]:
        """``files`` without the rows below ``version`` (already in the table)."""
        kept = []
        for f in files:
            if f.min_offset >= version:
                kept.append(f)
            elif f.max_offset >= version:
                key = (f.path, version)
                if key not in rewrites:
                    rewrites[key] = rewrite_from(
                        self.uri, f, version, self.compression, self.storage_options
                    )
                    if rewrites[key] is not None:
                        made.add(rewrites[key].path)  # type: ignore[union-attr]
                    log.info(
                        "sink %s: %s straddles the table's offset %d; rewrote it without the "
                        "rows already there",
                        self.path,
                        f.path,
                        version,
                    )
                replacement = rewrites[key]
                if replacement is not None:
                    kept.append(replacement)
        return kept

    # ------------------------------------------------------------------ committing

    def _before_commit(self, attempt: int, table: DeltaTable, decision: _Decision) -> None:
        """Called between the decision and the commit (an extension point for tests)."""

    def _try_commit(
        self,
        table: DeltaTable,
        plan: BatchPlan,
        decision: _Decision,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
    ) -> Literal["ok", "conflict"]:
        """Commit on the snapshot the decision was made on: "ok", or "conflict" when a
        concurrent commit got in the way. Raises SinkError when the commit certainly failed."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import AddAction

        table_id = str(table.metadata().id)
        txns = [
            Transaction(app_id(table_id, self.group_id, tp), until)
            for tp, until in sorted(decision.txns.items())
        ]
        adds: list[Any] = [
            AddAction(f.path, f.size, dict(f.partition_values), f.modification_time, True, f.stats)
            for f in decision.keep
        ]
        properties = CommitProperties(
            app_transactions=txns, custom_metadata=self._commit_info(plan, decision)
        )
        try:
            table.create_write_transaction(
                adds,
                "append",
                table.schema(),
                partition_by=list(partition_by) or None,
                commit_properties=properties,
            )
        except CommitFailedError:
            return "conflict"
        except Exception as exc:
            landed = self._landed(decision)
            if landed:
                log.warning(
                    "sink %s: batch %d: the commit reported %s: %s, but it is in the table",
                    self.path,
                    plan.batch_id,
                    type(exc).__name__,
                    exc,
                )
                return "ok"
            if landed is None:
                raise _Unknown(
                    f"sink {self.path}: batch {plan.batch_id}: the commit failed "
                    f"({type(exc).__name__}: {exc}) and the table cannot be read to tell whether "
                    "it landed; its files were left in place"
                ) from exc
            raise SinkError(
                f"sink {self.path}: batch {plan.batch_id}: the commit failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return "ok"

    def _commit_info(self, plan: BatchPlan, decision: _Decision) -> dict[str, str]:
        info = {
            "spark_groups.batch": str(plan.batch_id),
            "spark_groups.group": self.group_id,
            "spark_groups.member": self.member,
            "spark_groups.ranges": json.dumps(
                {
                    topic: {p: [r.from_offset, r.until_offset] for p, r in parts.items()}
                    for topic, parts in _by_topic(decision.written).items()
                },
                separators=(",", ":"),
            ),
            "spark_groups.dropped": json.dumps([str(tp) for tp in decision.dropped]),
            "spark_groups.outside": json.dumps(
                {
                    topic: {p: [v, until, by] for p, (v, until, by) in parts.items()}
                    for topic, parts in _by_topic(decision.outside).items()
                },
                separators=(",", ":"),
            ),
            "userMetadata": _txns_text(self.group_id, decision.txns),
        }
        return info

    def _landed(self, decision: _Decision) -> bool | None:
        """Whether the commit of ``decision`` is in the table (None: cannot tell)."""
        try:
            table = _load(self.uri, self.storage_options)
            if table is None:
                return False
            if decision.keep:
                uris = table.file_uris()
                wanted = decision.keep[0].path
                return any(u.endswith("/" + wanted) for u in uris)
            versions = _versions(table, self.group_id, decision.txns)
            return all(versions.get(tp) == until for tp, until in decision.txns.items())
        except Exception as exc:
            log.warning("sink %s: cannot read the table back: %s", self.path, exc)
            return None

    def _version_of(self, plan: BatchPlan, decision: _Decision) -> int | None:
        """The table version of the commit just made (found by its commit info; None if it
        cannot be found among the last few commits)."""
        info = self._commit_info(plan, decision)
        try:
            table = _load(self.uri, self.storage_options)
            if table is None:
                return None
            for entry in table.history(20):
                if all(entry.get(k) == info[k] for k in COMMIT_INFO_KEYS):
                    return int(entry["version"])
        except Exception as exc:
            log.debug("sink %s: cannot find the commit's version: %s", self.path, exc)
        return None

    def _cleanup(self, files: Sequence[DataFile], made: set[str], keep: Iterable[str]) -> None:
        """Delete the batch's files (and the driver's rewrites) except those in ``keep``."""
        kept = set(keep)
        doomed = [f.path for f in files if f.path not in kept]
        doomed += [p for p in made if p not in kept]
        if doomed:
            remove_files(self.uri, doomed, self.storage_options)


def _gap_origin(handover: Handover | None, table_offset: int) -> str:
    """Why a handover in the plan does not explain a gap ('' without one)."""
    if handover is None:
        return ""
    return (
        f" ({handover.by} committed [{handover.since}, {handover.until}), but spark_groups had "
        f"committed up to {handover.since}, past the table's {table_offset})"
    )


def _by_topic(ranges: Mapping[TopicPartition, T]) -> dict[str, dict[str, T]]:
    out: dict[str, dict[str, T]] = {}
    for tp in sorted(ranges):
        out.setdefault(tp.topic, {})[str(tp.partition)] = ranges[tp]
    return out


def _txns_text(group_id: str, txns: Mapping[TopicPartition, int]) -> str:
    """The commit's transaction versions as Delta's ``userMetadata``, which delta-spark's
    ``history()`` shows: ``{"group": g, "txns": {topic: {partition: next offset}}}``."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp, until in sorted(txns.items()):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = until
    return json.dumps({"group": group_id, "txns": by_topic}, separators=(",", ":"))


def _ranges_text(ranges: Mapping[TopicPartition, OffsetRange]) -> str:
    return ", ".join(
        f"{tp} [{r.from_offset}, {r.until_offset})" for tp, r in sorted(ranges.items())
    )


def _tp_list(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in partitions) or "none"
