"""The sink's Delta table: where each partition stands in it, and opening it for a commit.

The table says, per Kafka partition, up to where a group's rows are complete: one Delta
transaction id per partition (:func:`app_id`), its version the partition's next offset.
:func:`versions` reads them from one snapshot, :func:`committed_positions` from the newest
version at a path. :class:`SinkTable` opens the table for a batch's commit: at its newest
version, created when missing, refused when it uses features the sink cannot honour
(``spark_groups.sink.features``) or other partition columns than the query's, with the
query's new columns added when ``mergeSchema`` allows. docs/sink.md, "Transaction ids".
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_groups.errors import SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.sink.features import check_table_features
from spark_groups.sink.schema_changes import schema_change
from spark_groups.sink.upkeep import TABLE_DEFAULTS, batch_commit_hooks
from spark_groups.storage.commit_lock import commits_of
from spark_groups.storage.delta import create_table, open_table
from spark_groups.storage.files import table_uri
from spark_groups.storage.snapshots import LatestSnapshot
from spark_groups.storage.transactions import transaction_versions

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from spark_groups.sink.writer import DataFile

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.sink.table")

#: Prefix of the sink's Delta transaction (``txn``) app ids.
APP_ID_PREFIX = "spark_groups"
#: The snapshots :meth:`SinkTable.latest` keeps, by table, storage options and thread.
_SNAPSHOTS: dict[tuple[str, str, int], LatestSnapshot] = {}
#: More than this many (threads come and go) and they are all dropped.
MAX_SNAPSHOTS = 64


def app_id(table_id: str, group_id: str, tp: TopicPartition) -> str:
    """The Delta transaction app id of one partition of one group in one table.

    The group id comes last: topics cannot contain ``:`` and partitions are numbers, so the
    id is unambiguous whatever the group id contains.
    """
    return f"{APP_ID_PREFIX}:{table_id}:{tp.topic}:{tp.partition}:{group_id}"


def load(uri: str, storage_options: dict[str, str] | None) -> DeltaTable | None:
    """The table at ``uri`` at its newest version, or None when there is none.

    Raises :class:`~spark_groups.errors.SinkError` when it cannot be opened."""
    with _opening(uri):
        return open_table(uri, storage_options)


@contextlib.contextmanager
def _opening(uri: str) -> Iterator[None]:
    """Opening the table at ``uri``: any error as a :class:`~spark_groups.errors.SinkError`."""
    try:
        yield
    except Exception as exc:
        raise SinkError(f"sink table {uri}: cannot open it: {type(exc).__name__}: {exc}") from exc


def referenced(table: DeltaTable | None, paths: Iterable[str]) -> set[str]:
    """The ``paths`` (relative to the table, as the sink's writers name files) that the
    snapshot ``table`` references (none when there is no table)."""
    if table is None:
        return set()
    uris = table.file_uris()
    return {p for p in paths if any(u.endswith("/" + p) for u in uris)}


def versions(
    table: DeltaTable,
    group_id: str,
    partitions: Iterable[TopicPartition],
    storage_options: Mapping[str, str] | None = None,
) -> dict[TopicPartition, int]:
    """The transaction version (next offset) of ``group_id`` per partition in the snapshot
    ``table`` (its ``storage_options``: to read its log once for every partition,
    :mod:`spark_groups.storage.transactions`); partitions the group never wrote are absent."""
    table_id = str(table.metadata().id)
    ids = {app_id(table_id, group_id, tp): tp for tp in partitions}
    found = transaction_versions(table, ids, storage_options)
    return {ids[a]: v for a, v in found.items()}


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
    table = load(table_uri(table_path), storage_options)
    if table is None:
        return {}
    return versions(table, group_id, wanted, storage_options)


class SinkTable:
    """The sink's table at ``path`` (with ``storage_options`` on an object store), as a
    batch's commit opens it.

    ``partition_by`` are the partition columns for a new table (None: take the existing
    table's, or none); ``merge_schema`` allows adding the query's new columns to the table.
    Nothing is read or written until a method is called.
    """

    def __init__(
        self,
        path: str,
        storage_options: dict[str, str] | None = None,
        partition_by: tuple[str, ...] | None = None,
        merge_schema: bool = False,
    ) -> None:
        """Describe the table; see the class doc."""
        self.path = path
        self.uri = table_uri(path)
        self.storage_options = storage_options
        self.partition_by = partition_by
        self.merge_schema = merge_schema

    def __repr__(self) -> str:
        return f"SinkTable(path={self.path!r})"

    def load(self) -> DeltaTable | None:
        """The table at its newest version, or None when there is none (see :func:`load`)."""
        return load(self.uri, self.storage_options)

    def latest(self) -> DeltaTable | None:
        """:meth:`load`, from a snapshot this process keeps open between commits and brings
        up to date (``spark_groups.storage.snapshots``): the sink's commit process commits one
        batch at a time and reads only the commits made since its last. One per table *and
        thread*: a commit decides and commits on its own snapshot (the compare-and-set), so
        two threads never share one. Raises :class:`~spark_groups.errors.SinkError` as
        :func:`load` does."""
        key = (self.uri, json.dumps(self.storage_options, sort_keys=True), threading.get_ident())
        snapshot = _SNAPSHOTS.get(key)
        if snapshot is None:
            if len(_SNAPSHOTS) >= MAX_SNAPSHOTS:  # threads come and go in tests, not here
                _SNAPSHOTS.clear()
            snapshot = _SNAPSHOTS[key] = LatestSnapshot(self.uri, self.storage_options)
        with _opening(self.uri), snapshot.latest() as table:
            return table

    def partition_columns(self) -> tuple[str, ...] | None:
        """The existing table's partition columns, or None when there is no table yet."""
        table = self.load()
        if table is None:
            return None
        return tuple(table.metadata().partition_columns)

    def partition_by_for(
        self, files: Sequence[DataFile], snapshot: DeltaTable | None = None
    ) -> tuple[str, ...]:
        """The partition columns: the option's, else the table's (``snapshot``: the table as
        just loaded, used instead of loading it; without one it is loaded), else none; and the
        ones the files were written for, which must agree (the table may have been created by
        another writer after the tasks ran)."""
        if self.partition_by is not None:
            wanted = self.partition_by
        else:
            table = snapshot if snapshot is not None else self.load()
            wanted = tuple(table.metadata().partition_columns) if table is not None else ()
        for f in files:
            if tuple(f.partition_values) != wanted:
                raise SinkError(
                    f"sink {self.path}: data file {f.path} was written for partition columns "
                    f"{list(f.partition_values)}, the table is partitioned by {list(wanted)} "
                    "(was it created by another writer meanwhile?)"
                )
        return wanted

    def open(
        self, schema: pa.Schema, partition_by: tuple[str, ...], loaded: DeltaTable | None = None
    ) -> DeltaTable:
        """The table at its newest version (created when missing), with the query's columns;
        ``loaded``: the table just loaded, to use instead of loading it again."""
        table = loaded if loaded is not None else self.load()
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
        change = schema_change(table, schema, self.merge_schema, self.path)
        if change.added:
            table.alter.add_columns(list(change.added))
            log.info(
                "sink %s: added column(s) %s (mergeSchema)",
                self.path,
                ", ".join(f.name for f in change.added),
            )
        if change.grown:
            self._merge_fields(schema)
            log.info(
                "sink %s: added struct fields to column(s) %s (mergeSchema)",
                self.path,
                ", ".join(change.grown),
            )
        if change:
            table = self.load()
            assert table is not None
        return table

    def _merge_fields(self, schema: pa.Schema) -> None:
        """Merge the query's struct fields into the table's schema: a metadata-only commit."""
        from deltalake import write_deltalake

        write_deltalake(
            self.uri,
            pa.Table.from_pylist([], schema=pa.schema([f.with_nullable(True) for f in schema])),
            mode="append",
            schema_mode="merge",
            storage_options=self.storage_options,
        )

    def _create(self, schema: pa.Schema, partition_by: tuple[str, ...]) -> DeltaTable:
        """Create the table with the query's columns, all nullable (or adopt the table of a
        writer that created it first)."""
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        error = create_table(
            self.uri,
            nullable,
            partition_by=partition_by,
            description="written by the spark_groups delta-group sink",
            storage_options=self.storage_options,
            configuration=TABLE_DEFAULTS,
        )
        if error is None:
            log.info(
                "sink %s: created the table (partitioned by %s)", self.path, list(partition_by)
            )
        else:
            log.info("sink %s: create failed (%s); opening the table there", self.path, error)
        table = self.load()
        if table is None:
            raise SinkError(f"sink {self.path}: could not create the Delta table: {error}")
        return table


def append_files(
    snapshot: DeltaTable,
    files: Sequence[DataFile],
    partition_by: tuple[str, ...],
    txns: list[Any],
    info: Mapping[str, str],
    *,
    hooks: bool = False,
    max_commit_retries: int | None = None,
) -> None:
    """One ``append`` commit on ``snapshot`` adding ``files`` (already written), setting
    ``txns`` (deltalake ``Transaction``s) and carrying ``info``, with no post-commit hook
    (checkpoints are the upkeep's: ``spark_groups.sink.upkeep``), or with delta-rs' own with
    ``hooks`` (a kafka-share commit's); ``max_commit_retries`` as delta-rs' (None: its
    default). Raises what delta-rs raises
    (``CommitFailedError`` on a conflict)."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction

    adds: list[Any] = [
        AddAction(f.path, f.size, dict(f.partition_values), f.modification_time, True, f.stats)
        for f in files
    ]
    with commits_of(snapshot):
        snapshot.create_write_transaction(
            adds,
            "append",
            snapshot.schema(),
            partition_by=list(partition_by) or None,
            commit_properties=CommitProperties(
                app_transactions=txns,
                custom_metadata=dict(info),
                **(
                    {} if max_commit_retries is None else {"max_commit_retries": max_commit_retries}
                ),
            ),
            post_commithook_properties=None if hooks else batch_commit_hooks(),
        )
