"""The Delta offsets ledger: which offset ranges a consumer group has processed.

A Delta table written with ``deltalake`` (no JVM): every committed batch appends one row per
partition it read, in one Delta commit. A partition's position
(:meth:`OffsetLedger.latest_positions`) is the highest ``until_offset`` since its last reset
marker, the marker included (the maximum alone could never move back). :class:`OffsetLedger`
is the API over :mod:`~spark_groups.ledger.rows`, :mod:`~spark_groups.ledger.store`,
:mod:`~spark_groups.ledger.append`, :mod:`~spark_groups.ledger.queries` and
:mod:`~spark_groups.ledger.positions`; the append whose commit is version
``n * compact_every`` runs :mod:`~spark_groups.ledger.self_maintenance` and then
:mod:`~spark_groups.ledger.retention`. docs/offsets.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from spark_groups.errors import OptionError
from spark_groups.ledger import queries
from spark_groups.ledger.append import MAX_COMMIT_ATTEMPTS, REFRESH_AFTER_S, commit
from spark_groups.ledger.positions import positions_over_time, rows_with_positions
from spark_groups.ledger.retention import expire
from spark_groups.ledger.rows import (
    CATCH_UP_BATCH,
    LEDGER_SCHEMA,
    OUTSIDE_BATCH,
    RESET_BATCH,
    LedgerRow,
    invalid_row,
    to_arrow,
)
from spark_groups.ledger.self_maintenance import maintain
from spark_groups.ledger.store import FORMAT_KEY, GROUP_ID_KEY, LEDGER_FORMAT, LedgerStore
from spark_groups.offsets import TopicPartition

__all__ = [
    "CATCH_UP_BATCH",
    "DEFAULT_COMPACT_EVERY",
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

# The ledger logs under the logger it has always used (spark_groups.ledger.table).
logger = logging.getLogger("spark_groups.ledger.table")

#: The default maintenance period of the ledger, in table versions (why 50: docs/history.md,
#: "The ledger's commit time").
DEFAULT_COMPACT_EVERY = 50


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
        compact_every: int = DEFAULT_COMPACT_EVERY,
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
        self._store = LedgerStore(self.path, group_id, self.storage_options)

    def __repr__(self) -> str:
        return f"OffsetLedger(path={self.path!r}, group_id={self.group_id!r})"

    def append(self, rows: Sequence[LedgerRow]) -> None:
        """Record ``rows`` (normally all ranges of one batch) in one Delta commit.

        Creates the table on first use; does nothing for an empty ``rows``. Raises
        :class:`LedgerError` for invalid rows, a table of another group or schema, or when
        the commit fails (after :data:`MAX_COMMIT_ATTEMPTS` tries on concurrent commits).
        """
        if not rows:
            return
        store = self._store
        problem = invalid_row(rows)
        if problem is not None:
            raise store.error(f"{store.name}: {problem}")
        data = to_arrow(self.group_id, rows)
        with store.lock:
            version = commit(store, data)
            logger.debug(
                "ledger %s: appended %d row(s) as version %d", self.path, len(rows), version
            )
            if self.compact_every and version % self.compact_every == 0:
                table = store.table
                info = {GROUP_ID_KEY: self.group_id}
                if table is not None and not maintain(table, self.path, info):
                    store.table = None  # reload from storage next time
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
        return queries.latest_positions(self._store, partitions, own_only)

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
        newest = queries.newest_commit(self._store)
        if newest is not None:
            now = max(now, newest + timedelta(microseconds=1))
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
        return queries.history(self._store, partitions, since, until)

    def delete_where(self, predicate: str) -> int:
        """Delete the rows matching the SQL ``predicate`` in one Delta commit (retention:
        :mod:`spark_groups.ledger.retention`); return how many rows were deleted."""
        return self._store.delete(predicate)

    def last_batch(self) -> int | None:
        """The highest batch number this group recorded; ``None`` for an empty ledger."""
        return queries.last_batch(self._store)
