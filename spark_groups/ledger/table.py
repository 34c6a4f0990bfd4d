"""The Delta offsets ledger: which offset ranges a consumer group has processed.

The ledger is a Delta table written with ``deltalake`` (delta-rs, no JVM). Every committed
micro-batch appends one row per partition it read, in a single Delta commit
(:mod:`spark_groups.ledger.rows`: the schema and the special rows). A partition's position
(:meth:`OffsetLedger.latest_positions`) is the highest ``until_offset`` since its last reset
marker, the marker included: the maximum alone could never move back. The table keeps the
minimal Delta protocol (reader 1, writer 2).

**One table, one group.** The group id is stored in the table's configuration under
:data:`GROUP_ID_KEY` when the table is created (delta-rs only accepts such a non-``delta.*``
key through ``DeltaTable.create(..., raise_if_key_not_exists=False)``; ``write_deltalake``
rejects it). Opening a table of another group, a Delta table with another schema, or a
directory holding files but no Delta log raises :class:`~spark_groups.errors.LedgerError`.

**Maintenance** (compaction, vacuum, checkpoints, log clean-up) is in
:mod:`spark_groups.ledger.maintenance`: the append whose commit is table version
``n * compact_every`` runs it, right after its commit, and then, with a ``retention``,
deletes the rows older than that which no position depends on
(:mod:`spark_groups.ledger.retention`).

**Concurrent writers.** Appends never conflict logically. delta-rs rebases a commit onto
newer versions itself (``max_commit_retries``, 15 by default); when it still gives up with
``CommitFailedError`` the whole append is retried with jittered back-off, up to
:data:`MAX_COMMIT_ATTEMPTS` times. A failed commit writes nothing to the log, so retrying
never duplicates rows.

**Reads** refresh the table (``update_incremental``, ~2 ms) and go through delta-rs' DataFusion
``QueryBuilder``: only the needed columns are read, the group predicate is pushed down to
the scan, and partitions are picked from the (small) result. Their cost is about 0.4 ms per
active file, which is what compaction keeps small. Reading through
``DeltaTable.to_pyarrow_table()`` with its default file system (a Python ``PyFileSystem``
over delta-rs) made the interpreter abort at exit ("terminate called without an active
exception", exit code 134) in about a third of the runs with deltalake 1.6.6 / pyarrow 26.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from spark_groups.delta import create_table, open_table, query, sql_string
from spark_groups.errors import LedgerError, OptionError
from spark_groups.files import local_path
from spark_groups.ledger.maintenance import (
    CHECKPOINT_INTERVAL,
    CHECKPOINT_INTERVAL_KEY,
    DELETED_FILE_RETENTION,
    LOG_RETENTION,
    maintain,
)
from spark_groups.ledger.positions import positions_over_time, rows_with_positions
from spark_groups.ledger.retention import expire
from spark_groups.ledger.rows import (
    CATCH_UP_BATCH,
    LEDGER_SCHEMA,
    OUTSIDE_BATCH,
    RESET_BATCH,
    SCHEMA_WITHOUT_LOG_END,
    LedgerRow,
    invalid_row,
    to_arrow,
)
from spark_groups.offsets import TopicPartition

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = [
    "CATCH_UP_BATCH",
    "FORMAT_KEY",
    "GROUP_ID_KEY",
    "LEDGER_FORMAT",
    "LEDGER_SCHEMA",
    "MAX_COMMIT_ATTEMPTS",
    "OUTSIDE_BATCH",
    "REFRESH_AFTER_S",
    "RESET_BATCH",
    "LedgerRow",
    "OffsetLedger",
    "positions_over_time",
    "rows_with_positions",
]

logger = logging.getLogger(__name__)

#: Table configuration key holding the id of the consumer group that owns the ledger.
GROUP_ID_KEY = "spark_groups.group_id"
#: Table configuration key holding the ledger's format version.
FORMAT_KEY = "spark_groups.ledger_format"
#: The ledger format this module writes and reads.
LEDGER_FORMAT = "1"
#: How many times :meth:`OffsetLedger.append` tries a commit that delta-rs gave up on.
MAX_COMMIT_ATTEMPTS = 8
#: An append refreshes its table snapshot first when it is older than this. Fresher
#: snapshots are written on as they are (delta-rs rebases the commit); a snapshot older than
#: the ledger's log retention (1 hour) could not be: the commits after it are deleted and
#: delta-rs fails with "Invalid table version" (a query with an hour-long trigger beside a
#: busy member of the same ledger).
REFRESH_AFTER_S = 600.0

_SQL_TABLE = "ledger"
_HISTORY_ORDER = [
    ("committed_at", "ascending"),
    ("batch", "ascending"),
    ("topic", "ascending"),
    ("partition", "ascending"),
]


class OffsetLedger:
    """The Delta offsets ledger of one consumer group at ``path``.

    ``path`` is a local path or a URI that delta-rs understands (``s3://``, ``abfss://``,
    ...); ``storage_options`` are passed to delta-rs unchanged. The table is created by the
    first :meth:`append`. ``compact_every`` is the maintenance period in table versions
    (0: never; see the module documentation); ``retention`` how long rows are kept (None:
    forever; see :mod:`spark_groups.ledger.retention`). Methods are thread-safe; several
    ``OffsetLedger`` objects, in one process or several, may append to the same table.
    """

    def __init__(
        self,
        path: str,
        group_id: str,
        storage_options: dict[str, str] | None = None,
        compact_every: int = 200,
        retention: timedelta | None = None,
    ) -> None:
        """Describe the ledger; nothing is read or written until the first method call."""
        if not isinstance(group_id, str) or not group_id:
            raise OptionError("group.id", "the offsets ledger needs a non-empty group id")
        if (
            not isinstance(compact_every, int)
            or isinstance(compact_every, bool)
            or (compact_every < 0)
        ):
            raise OptionError(
                "compact_every", f"must be an integer >= 0 (0 = never), got {compact_every!r}"
            )
        self.path = str(path)
        self.group_id = group_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.compact_every = compact_every
        self.retention = retention
        self._table: DeltaTable | None = None
        self._fresh_at = 0.0  # time.monotonic() when _table was last brought up to date
        self._has_log_end = True  # False for a ledger written before the column existed
        self._lock = threading.RLock()

    def _error(self, message: str) -> LedgerError:
        """A :class:`LedgerError` about this ledger (its path as data)."""
        return LedgerError(message, path=self.path)

    def __repr__(self) -> str:
        return f"OffsetLedger(path={self.path!r}, group_id={self.group_id!r})"

    @property
    def _name(self) -> str:
        """How errors name this ledger: its path and the option that set it."""
        return f"offsets ledger {self.path} (option offsets.table)"

    # ------------------------------------------------------------------ public API

    def append(self, rows: Sequence[LedgerRow]) -> None:
        """Record ``rows`` (normally all ranges of one batch) in one Delta commit.

        Creates the table on first use; does nothing for an empty ``rows``. Raises
        :class:`LedgerError` for invalid rows, a table of another group or schema, or when
        the commit fails (after :data:`MAX_COMMIT_ATTEMPTS` tries on concurrent commits).
        """
        if not rows:
            return
        problem = invalid_row(rows)
        if problem is not None:
            raise self._error(f"{self._name}: {problem}")
        data = to_arrow(self.group_id, rows)
        with self._lock:
            version = self._commit(data)
            logger.debug(
                "ledger %s: appended %d row(s) as version %d", self.path, len(rows), version
            )
            if self.compact_every and version % self.compact_every == 0:
                table = self._table
                info = {GROUP_ID_KEY: self.group_id}
                if table is not None and not maintain(table, self.path, info):
                    self._table = None  # reload from storage next time
                if self.retention:
                    expire(self, datetime.now(UTC) - self.retention)

    def latest_positions(
        self, partitions: Iterable[TopicPartition] | None = None, *, own_only: bool = False
    ) -> dict[TopicPartition, int]:
        """Where this group stands per partition: the highest ``until_offset`` recorded since
        the partition's last reset marker (:data:`RESET_BATCH`), the marker's own
        ``until_offset`` included; with no reset, the highest ``until_offset`` of all rows.

        So a replayed, older range never moves the position back, and a reset does (see
        :meth:`record_reset`). Only ``partitions`` are looked up when given (partitions never
        recorded are absent from the result). With ``own_only``, rows of offsets committed
        outside spark_groups (:data:`OUTSIDE_BATCH`) are left out: where spark_groups itself
        last stood. Returns ``{}`` when the table does not exist.
        """
        wanted = None if partitions is None else set(partitions)
        if wanted is not None and not wanted:
            return {}
        # Partitions are picked after the aggregation, not in the SQL: an OR of
        # topic/partition terms made DataFusion twice as slow per file, and Parquet
        # statistics cannot skip anything here (every file holds every partition).
        where = self._where()
        sql = (
            f'WITH r AS (SELECT "topic" AS r_topic, "partition" AS r_partition, '
            f'MAX("committed_at") AS r_at FROM {_SQL_TABLE} '
            f'WHERE {where} AND "batch" = {RESET_BATCH} GROUP BY "topic", "partition") '
            f'SELECT "topic", "partition", MAX("until_offset") AS "until_offset" '
            f"FROM {_SQL_TABLE} LEFT JOIN r "
            f'ON "topic" = r_topic AND "partition" = r_partition '
            f'WHERE {where} AND (r_at IS NULL OR "committed_at" > r_at '
            f'OR ("batch" = {RESET_BATCH} AND "committed_at" = r_at)) '
            + (f'AND "batch" <> {OUTSIDE_BATCH} ' if own_only else "")
            + 'GROUP BY "topic", "partition"'
        )
        table = self._query(sql)
        if table is None:
            return {}
        positions = {
            TopicPartition(str(topic), int(partition)): int(until)
            for topic, partition, until in zip(
                table.column("topic").to_pylist(),
                table.column("partition").to_pylist(),
                table.column("until_offset").to_pylist(),
                strict=True,
            )
        }
        if wanted is None:
            return positions
        return {tp: until for tp, until in positions.items() if tp in wanted}

    def record_reset(
        self,
        positions: Mapping[TopicPartition, int],
        previous: Mapping[TopicPartition, int],
        member_id: str,
    ) -> list[LedgerRow]:
        """Append reset markers setting the group's position to ``positions``, in one commit.

        ``previous`` holds the positions before the reset (a partition missing there is
        recorded as ``from_offset == until_offset``); ``member_id`` says who reset (e.g.
        ``reset:user@host``; never a secret). The markers are stamped strictly after every
        row already in the ledger (a later wall clock if this machine's is behind), so
        :meth:`latest_positions` returns exactly ``positions`` afterwards, forwards or
        backwards. Rows appended later count from the marker on. Returns the rows written.
        """
        if not positions:
            return []
        now = datetime.now(UTC)
        newest = self._query(
            f'SELECT MAX("committed_at") AS "at" FROM {_SQL_TABLE} WHERE {self._where()}'
        )
        if newest is not None and newest.num_rows and newest.column("at")[0].as_py() is not None:
            now = max(now, newest.column("at")[0].as_py() + timedelta(microseconds=1))
        rows = [
            LedgerRow(
                topic=tp.topic,
                partition=tp.partition,
                from_offset=previous.get(tp, until),
                until_offset=until,
                member_id=member_id,
                generation=-1,
                batch=RESET_BATCH,
                committed_at=now,
            )
            for tp, until in sorted(positions.items())
        ]
        self.append(rows)
        return rows

    def history(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> pa.Table:
        """This group's rows (schema :data:`LEDGER_SCHEMA`), oldest first.

        Sorted by ``committed_at``, ``batch``, ``topic``, ``partition``. ``partitions``
        keeps only those partitions; ``since`` / ``until`` (timezone-aware) keep rows with
        ``since <= committed_at < until``. An empty table when the ledger does not exist yet.
        """
        for name, bound in (("since", since), ("until", until)):
            if bound is not None and bound.utcoffset() is None:
                raise self._error(
                    f"{self._name}: history({name}=...) needs a timezone-aware "
                    f"datetime, got {bound!r}"
                )
        wanted = None if partitions is None else set(partitions)
        if wanted is not None and not wanted:
            return LEDGER_SCHEMA.empty_table()
        table = self._query(f"SELECT * FROM {_SQL_TABLE} WHERE {self._where()}")
        if table is None:
            return LEDGER_SCHEMA.empty_table()
        if "log_end" not in table.column_names:  # written before the column existed
            table = table.append_column("log_end", pa.nulls(table.num_rows, pa.int64()))
        table = table.select(LEDGER_SCHEMA.names).cast(LEDGER_SCHEMA)
        if wanted is not None:
            table = table.filter(_partition_mask(table, wanted))
        if since is not None:
            bound = pa.scalar(since, type=pa.timestamp("us", tz="UTC"))
            table = table.filter(pc.greater_equal(table.column("committed_at"), bound))
        if until is not None:
            bound = pa.scalar(until, type=pa.timestamp("us", tz="UTC"))
            table = table.filter(pc.less(table.column("committed_at"), bound))
        return table.sort_by(_HISTORY_ORDER)

    def delete_where(self, predicate: str) -> int:
        """Delete the rows matching the SQL ``predicate`` in one Delta commit (retention:
        :mod:`spark_groups.ledger.retention`); return how many rows were deleted."""
        with self._lock:
            table = self._load()
            if table is None:
                return 0
            with self._wrapped("deleting old rows"):
                metrics = table.delete(predicate)
            return int(metrics.get("num_deleted_rows", 0) or 0)

    def last_batch(self) -> int | None:
        """The highest batch number this group recorded; ``None`` for an empty ledger."""
        where = self._where()
        table = self._query(f'SELECT MAX("batch") AS "batch" FROM {_SQL_TABLE} WHERE {where}')
        if table is None or table.num_rows == 0:
            return None
        value = table.column("batch")[0].as_py()
        return None if value is None else int(value)

    # ------------------------------------------------------------------ opening

    @contextmanager
    def _wrapped(self, action: str) -> Iterator[None]:
        """Turn any error of delta-rs / Arrow inside the block into a :class:`LedgerError`."""
        try:
            yield
        except LedgerError:
            raise
        except Exception as exc:
            raise self._error(
                f"{self._name}: {action} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _load(self) -> DeltaTable | None:
        """The table at its newest version, validated; ``None`` if it does not exist yet."""
        if self._table is not None:
            try:
                self._table.update_incremental()
            except Exception as exc:
                # E.g. the log entries after our version were cleaned up: load afresh.
                logger.info("ledger %s: reloading the table (%s)", self.path, exc)
                self._table = None
            else:
                self._validate(self._table)
                self._fresh_at = time.monotonic()
                return self._table
        with self._wrapped("opening the table"):
            table = open_table(self.path, self.storage_options)
        if table is None:
            self._check_can_create()
            return None
        self._validate(table)
        self._table = table
        self._fresh_at = time.monotonic()
        return table

    def _validate(self, table: DeltaTable) -> None:
        """Refuse a table with another schema, of another group or a newer format."""
        with self._wrapped("reading the table metadata"):
            schema = pa.schema(table.schema().to_arrow())
            configuration = dict(table.metadata().configuration)
        actual = [(f.name, f.type) for f in schema]
        expected = [(f.name, f.type) for f in LEDGER_SCHEMA]
        self._has_log_end = actual == expected
        if actual != expected and actual != [(f.name, f.type) for f in SCHEMA_WITHOUT_LOG_END]:
            raise self._error(
                f"{self._name}: the Delta table there has another schema, it is "
                f"not a spark_groups offsets ledger (found {_schema_text(schema)}; expected "
                f"{_schema_text(LEDGER_SCHEMA)})"
            )
        owner = configuration.get(GROUP_ID_KEY)
        if owner is None:
            raise self._error(
                f"{self._name}: the Delta table there has no '{GROUP_ID_KEY}' "
                f"in its configuration: it was not created as a spark_groups offsets ledger"
            )
        if owner != self.group_id:
            raise self._error(
                f"{self._name}: the table belongs to consumer group {owner!r}, "
                f"not {self.group_id!r}; every group needs its own ledger path"
            )
        fmt = configuration.get(FORMAT_KEY, LEDGER_FORMAT)
        if fmt != LEDGER_FORMAT:
            raise self._error(
                f"{self._name}: ledger format {fmt!r} is not supported by this "
                f"version of spark_groups (it reads format {LEDGER_FORMAT!r})"
            )

    def _check_can_create(self) -> None:
        """Refuse to create a ledger inside a local directory that holds other files."""
        local = local_path(self.path)
        if local is None or not local.exists():
            return
        if not local.is_dir():
            raise self._error(f"{self._name}: the path is a file, not a directory")
        entries = sorted(p.name for p in local.iterdir())
        if entries == ["_delta_log"] and (local / "_delta_log").is_dir():
            # An empty log, or a table another writer is creating right now: create (or
            # fail to, and then adopt and validate what the other writer made).
            return
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise self._error(
                f"{self._name}: the directory is not a Delta table (no readable "
                f"_delta_log) but holds {len(entries)} entries ({shown}); refusing to create "
                f"a ledger there"
            )

    def _create(self) -> DeltaTable:
        """Create the table (or adopt one created concurrently) and return it validated."""
        # _load() just ran _check_can_create(); running it again here would refuse a table
        # that another writer created in between (its _delta_log is then not empty).
        configuration = {
            GROUP_ID_KEY: self.group_id,
            FORMAT_KEY: LEDGER_FORMAT,
            "delta.deletedFileRetentionDuration": DELETED_FILE_RETENTION,
            "delta.logRetentionDuration": LOG_RETENTION,
            CHECKPOINT_INTERVAL_KEY: CHECKPOINT_INTERVAL,
        }
        create_error = create_table(
            self.path,
            LEDGER_SCHEMA,
            name="spark_groups_offsets_ledger",
            description=f"spark_groups offsets ledger of consumer group {self.group_id!r}",
            configuration=configuration,
            storage_options=self.storage_options,
        )
        if create_error is None:
            logger.info("ledger %s: created for group %r", self.path, self.group_id)
        else:
            # Most likely another writer created it first: adopt it if it is valid.
            logger.info(
                "ledger %s: create failed (%s); opening the table there", self.path, create_error
            )
        table = self._load()
        if table is None:
            raise self._error(
                f"{self._name}: could not create the Delta table: {create_error}"
            ) from create_error
        return table

    # ------------------------------------------------------------------ writing

    def _commit(self, data: pa.Table) -> int:
        """Append ``data`` in one commit; return the table version of that commit."""
        from deltalake import CommitProperties, PostCommitHookProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError

        batches = sorted(set(data.column("batch").to_pylist()))
        properties = CommitProperties(
            custom_metadata={GROUP_ID_KEY: self.group_id, "spark_groups.batches": str(batches)}
        )
        # delta-rs' own checkpoint every delta.checkpointInterval commits is kept; its
        # expired-log cleanup is not: it lists the whole log on *every* commit (~10 ms at a
        # thousand log entries, growing), and the maintenance does it every compact_every.
        hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
        for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
            # No refresh before writing: a stale snapshot is fine for a blind append (delta-rs
            # rebases it onto newer versions), and refreshing cost ~5 ms per commit.
            stale = time.monotonic() - self._fresh_at > REFRESH_AFTER_S
            table = self._table if self._table is not None and not stale else self._load()
            if table is None:
                table = self._create()
            try:
                write_deltalake(
                    table,
                    data,
                    mode="append",
                    # A ledger written before log_end existed gets the column now.
                    schema_mode=None if self._has_log_end else "merge",
                    commit_properties=properties,
                    post_commithook_properties=hooks,
                )
            except CommitFailedError as exc:
                self._table = None  # reload from storage before the next attempt
                if attempt == MAX_COMMIT_ATTEMPTS:
                    raise self._error(
                        f"{self._name}: commit of batch(es) {batches} failed "
                        f"{attempt} times on concurrent commits: {exc}"
                    ) from exc
                delay = random.uniform(0.0, min(0.5, 0.01 * 2**attempt))
                logger.warning(
                    "ledger %s: commit of batch(es) %s failed on concurrent commits "
                    "(attempt %d of %d); retrying in %.0f ms: %s",
                    self.path,
                    batches,
                    attempt,
                    MAX_COMMIT_ATTEMPTS,
                    delay * 1000,
                    exc,
                )
                time.sleep(delay)
            except Exception as exc:
                self._table = None
                raise self._error(
                    f"{self._name}: appending batch(es) {batches} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            else:
                self._fresh_at = time.monotonic()  # the snapshot is the commit's version
                return table.version()
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ reading

    def _where(self) -> str:
        """The SQL predicate selecting this group's rows."""
        return f'"group_id" = {sql_string(self.group_id)}'

    def _query(self, sql: str) -> pa.Table | None:
        """Run ``sql`` against the newest version; ``None`` when the table does not exist."""
        with self._lock:
            table = self._load()
            if table is None:
                return None
            with self._wrapped("reading"):
                return query(table, _SQL_TABLE, sql)


def _partition_mask(table: pa.Table, partitions: set[TopicPartition]) -> pa.ChunkedArray:
    """A boolean mask of the rows of ``table`` that belong to ``partitions``."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    mask = pc.equal(table.column("partition"), -1)  # all false
    for topic, parts in by_topic.items():
        in_topic = pc.equal(table.column("topic"), topic)
        in_parts = pc.is_in(table.column("partition"), value_set=pa.array(parts, pa.int32()))
        mask = pc.or_(mask, pc.and_(in_topic, in_parts))
    return mask


def _schema_text(schema: pa.Schema) -> str:
    """A one-line ``name type, ...`` form of ``schema``."""
    return ", ".join(f"{f.name} {f.type}" for f in schema)
