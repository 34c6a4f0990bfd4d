"""The Delta table behind a ledger: opened at its newest version, validated, created on first use.

One table, one group: the group id is stored in the table's configuration
(:data:`GROUP_ID_KEY`, which delta-rs accepts only through ``DeltaTable.create(...,
raise_if_key_not_exists=False)``). Opening a table of another group, a Delta table with
another schema, or a directory holding files but no Delta log raises
:class:`~spark_groups.errors.LedgerError`, as does every error of delta-rs or Arrow (the
ledger's path as data). The table keeps the minimal Delta protocol (reader 1, writer 2), with
the settings of :mod:`spark_groups.ledger.self_maintenance`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_groups.errors import LedgerError
from spark_groups.ledger.rows import LEDGER_SCHEMA, SCHEMA_WITHOUT_LOG_END
from spark_groups.ledger.self_maintenance import (
    CHECKPOINT_INTERVAL,
    CHECKPOINT_INTERVAL_KEY,
    DELETED_FILE_RETENTION,
    LOG_RETENTION,
)
from spark_groups.storage.delta import create_table, open_table, query, sql_string
from spark_groups.storage.files import local_path

if TYPE_CHECKING:
    from deltalake import DeltaTable

# The ledger logs under the logger it has always used (spark_groups.ledger.table).
logger = logging.getLogger("spark_groups.ledger.table")

#: Table configuration key holding the id of the consumer group that owns the ledger.
GROUP_ID_KEY = "spark_groups.group_id"
#: Table configuration key holding the ledger's format version.
FORMAT_KEY = "spark_groups.ledger_format"
#: The ledger format this module writes and reads.
LEDGER_FORMAT = "1"

#: The name queries give the table (``SELECT ... FROM ledger``).
SQL_TABLE = "ledger"


class LedgerStore:
    """The Delta table of the ledger of group ``group_id`` at ``path``, and its snapshot.

    ``table`` is the snapshot (``None`` until loaded, or after an error: reloaded from
    storage next time), ``fresh_at`` when it was last brought up to date
    (``time.monotonic()``), ``has_log_end`` whether the table has the ``log_end`` column.
    ``lock`` guards them; :meth:`query` and :meth:`delete` take it themselves.
    """

    def __init__(self, path: str, group_id: str, storage_options: dict[str, str] | None) -> None:
        self.path = path
        self.group_id = group_id
        self.storage_options = storage_options
        self.table: DeltaTable | None = None
        self.fresh_at = 0.0
        self.has_log_end = True  # False for a ledger written before the column existed
        self.lock = threading.RLock()

    @property
    def name(self) -> str:
        """How errors name this ledger: its path and the option that set it."""
        return f"offsets ledger {self.path} (option offsets.table)"

    @property
    def where(self) -> str:
        """The SQL predicate selecting this group's rows."""
        return f'"group_id" = {sql_string(self.group_id)}'

    def error(self, message: str) -> LedgerError:
        """A :class:`LedgerError` about this ledger (its path as data)."""
        return LedgerError(message, path=self.path)

    @contextmanager
    def wrapped(self, action: str) -> Iterator[None]:
        """Turn any error of delta-rs / Arrow inside the block into a :class:`LedgerError`."""
        try:
            yield
        except LedgerError:
            raise
        except Exception as exc:
            raise self.error(f"{self.name}: {action} failed: {type(exc).__name__}: {exc}") from exc

    def query(self, sql: str) -> pa.Table | None:
        """Run ``sql`` against the newest version; ``None`` when the table does not exist."""
        with self.lock:
            table = self.load()
            if table is None:
                return None
            with self.wrapped("reading"):
                return query(table, SQL_TABLE, sql)

    def delete(self, predicate: str) -> int:
        """Delete the rows matching the SQL ``predicate`` in one Delta commit; return how
        many rows were deleted (0 when the table does not exist)."""
        with self.lock:
            table = self.load()
            if table is None:
                return 0
            with self.wrapped("deleting old rows"):
                metrics = table.delete(predicate)
            return int(metrics.get("num_deleted_rows", 0) or 0)

    def load(self) -> DeltaTable | None:
        """The table at its newest version, validated; ``None`` if it does not exist yet."""
        if self.table is not None:
            try:
                self.table.update_incremental()
            except Exception as exc:
                # E.g. the log entries after our version were cleaned up: load afresh.
                logger.info("ledger %s: reloading the table (%s)", self.path, exc)
                self.table = None
            else:
                self._validate(self.table)
                self.fresh_at = time.monotonic()
                return self.table
        with self.wrapped("opening the table"):
            table = open_table(self.path, self.storage_options)
        if table is None:
            self._check_can_create()
            return None
        self._validate(table)
        self.table = table
        self.fresh_at = time.monotonic()
        return table

    def create(self) -> DeltaTable:
        """Create the table (or adopt one created concurrently) and return it validated."""
        # load() just ran _check_can_create(); running it again here would refuse a table
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
        table = self.load()
        if table is None:
            raise self.error(
                f"{self.name}: could not create the Delta table: {create_error}"
            ) from create_error
        return table

    def _validate(self, table: DeltaTable) -> None:
        """Refuse a table with another schema, of another group or a newer format."""
        with self.wrapped("reading the table metadata"):
            schema = pa.schema(table.schema().to_arrow())
            configuration = dict(table.metadata().configuration)
        actual = [(f.name, f.type) for f in schema]
        expected = [(f.name, f.type) for f in LEDGER_SCHEMA]
        self.has_log_end = actual == expected
        if actual != expected and actual != [(f.name, f.type) for f in SCHEMA_WITHOUT_LOG_END]:
            raise self.error(
                f"{self.name}: the Delta table there has another schema, it is "
                f"not a spark_groups offsets ledger (found {_schema_text(schema)}; expected "
                f"{_schema_text(LEDGER_SCHEMA)})"
            )
        owner = configuration.get(GROUP_ID_KEY)
        if owner is None:
            raise self.error(
                f"{self.name}: the Delta table there has no '{GROUP_ID_KEY}' "
                f"in its configuration: it was not created as a spark_groups offsets ledger"
            )
        if owner != self.group_id:
            raise self.error(
                f"{self.name}: the table belongs to consumer group {owner!r}, "
                f"not {self.group_id!r}; every group needs its own ledger path"
            )
        fmt = configuration.get(FORMAT_KEY, LEDGER_FORMAT)
        if fmt != LEDGER_FORMAT:
            raise self.error(
                f"{self.name}: ledger format {fmt!r} is not supported by this "
                f"version of spark_groups (it reads format {LEDGER_FORMAT!r})"
            )

    def _check_can_create(self) -> None:
        """Refuse to create a ledger inside a local directory that holds other files."""
        local = local_path(self.path)
        if local is None or not local.exists():
            return
        if not local.is_dir():
            raise self.error(f"{self.name}: the path is a file, not a directory")
        entries = sorted(p.name for p in local.iterdir())
        if entries == ["_delta_log"] and (local / "_delta_log").is_dir():
            # An empty log, or a table another writer is creating right now: create (or
            # fail to, and then adopt and validate what the other writer made).
            return
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise self.error(
                f"{self.name}: the directory is not a Delta table (no readable "
                f"_delta_log) but holds {len(entries)} entries ({shown}); refusing to create "
                f"a ledger there"
            )


def _schema_text(schema: pa.Schema) -> str:
    """A one-line ``name type, ...`` form of ``schema``."""
    return ", ".join(f"{f.name} {f.type}" for f in schema)
