"""Every application transaction of a Delta table, read once and then brought forward.

The sink keeps one transaction id per Kafka partition and group (its position) and one per
claimed partition, asked at every batch's decision and every safe point; delta-rs answers one
id per call, each a replay of the log. :func:`transaction_versions` answers every id of a
snapshot from one map per table (:class:`AppTransactions`):

1. **Load**: the ``txn`` column of the newest classic checkpoint at or below the snapshot's
   version, then the ``txn`` actions of each commit after it, in order (the last one wins).
2. **Forward**: for a newer snapshot, only the commits in between; for an older one, a load.
3. **Fall back** to delta-rs' call per id where the map cannot be built that way: a
   multi-part or V2 checkpoint, a commit file missing, expiring transactions
   (``delta.setTransactionRetentionDuration``), any error reading the log.

Maps are kept per table id, storage options and thread. docs/sink.md, "The compare-and-set".
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from spark_groups.storage.delta import open_table
from spark_groups.storage.files import Location, location, table_uri

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

#: The table property whose transactions expire; the map is not used for such a table.
RETENTION_PROPERTY = "delta.setTransactionRetentionDuration"
#: At most this many maps are kept (tables x storage options x threads).
MAX_MAPS = 64
#: Any checkpoint file (multi-part and V2 ones too) and its version.
_ANY_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")
#: A ``txn`` line as delta-rs writes it, read without the JSON parser (a commit of 5,000
#: partitions has 5,000 of them, read by every member); any other form is parsed as JSON.
_TXN_LINE = re.compile(r'\{"txn":\{"appId":"([^"\\]*)","version":(\d+)[,}]')


class LogNotReplayable(Exception):
    """The log cannot be replayed here (see the module doc, step 3)."""


class AppTransactions:
    """The app transaction versions of one table (``uri``, table id) as of :attr:`version`."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None) -> None:
        self.where: Location = location(f"{uri.rstrip('/')}/_delta_log", storage_options)
        self.version: int | None = None
        self.versions: dict[str, int] = {}
        #: The log cannot be replayed here (step 3): every answer is delta-rs' own.
        self.unreplayable = False

    def at(self, version: int) -> dict[str, int]:
        """The versions as of table ``version``; raises :class:`LogNotReplayable`."""
        if self.version is None or version < self.version:
            self._load(version)
        elif version > self.version:
            self._apply(self.version + 1, version)
        return self.versions

    def _load(self, version: int) -> None:
        self.version, self.versions = None, {}
        names = [i.base_name for i in self._list()]
        checkpoints = [int(m[1]) for n in names if (m := _ANY_CHECKPOINT.match(n))]
        below = [v for v in checkpoints if v <= version]
        start = 0
        if below:
            newest = max(below)
            if f"{newest:020d}.checkpoint.parquet" not in names:
                raise LogNotReplayable(f"checkpoint {newest} is multi-part or V2")
            self._read_checkpoint(newest)
            start = newest + 1
        self.version = start - 1
        self._apply(start, version)

    def _list(self) -> list[pafs.FileInfo]:
        return self.where.fs.get_file_info(pafs.FileSelector(self.where.path))

    def _read_checkpoint(self, version: int) -> None:
        import pyarrow.parquet as pq

        path = self.where.child(f"{version:020d}.checkpoint.parquet")
        txn = pq.read_table(path, columns=["txn"], filesystem=self.where.fs).column("txn")
        for row in txn.drop_null().to_pylist():
            self.versions[row["appId"]] = int(row["version"])

    def _apply(self, first: int, last: int) -> None:
        """Replay the ``txn`` actions of commits ``first .. last``, in order."""
        for v in range(first, last + 1):
            try:
                self.apply(v, self.read(v))
            except FileNotFoundError as exc:
                raise LogNotReplayable(f"commit {v} is not in the log") from exc

    def read(self, version: int) -> str:
        """The text of commit ``version``'s log file (FileNotFoundError: none yet)."""
        return self.where.read_text(self.where.child(f"{version:020d}.json"))

    def apply(self, version: int, text: str) -> None:
        """Replay the ``txn`` actions of commit ``version`` (its log file's ``text``)."""
        for line in text.splitlines():
            if line.startswith('{"txn"'):
                plain = _TXN_LINE.match(line)
                if plain is not None:
                    self.versions[plain.group(1)] = int(plain.group(2))
                    continue
                txn = json.loads(line)["txn"]
                self.versions[txn["appId"]] = int(txn["version"])
        self.version = version


@dataclass(frozen=True)
class TableTransactions:
    """A table's app transactions at one version: from a replayed map, or (``table``) from
    delta-rs one id at a time (step 3 of the module doc)."""

    table_id: str
    version: int
    replayed: Mapping[str, int] | None = None
    table: DeltaTable | None = None

    def of(self, app_ids: Iterable[str]) -> dict[str, int]:
        """The version of each of ``app_ids``; ids never set are absent."""
        if self.replayed is not None:
            return {a: self.replayed[a] for a in app_ids if a in self.replayed}
        assert self.table is not None
        return _one_by_one(self.table, app_ids)


class LatestTransactions:
    """The app transactions of the table at ``path`` at its newest version, for a reader that
    needs nothing else of the table (the source's safe point asking what the sink's table
    holds): a delta-rs load the first time, then only the ``txn`` lines of the commits made
    since, found by reading the next commit file until there is none (no listing, no
    snapshot to update). It loads again when the commit it last read changed (the table was
    made again at its path), when a commit changes the table's metadata, and after any
    error. One object serves one thread at a time."""

    def __init__(self, path: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = table_uri(path)
        self.storage_options = dict(storage_options) if storage_options else None
        self._map: AppTransactions | None = None
        self._table_id = ""
        self._held = ""  # the text of the commit the map last read

    def latest(self) -> TableTransactions | None:
        """The transactions at the newest version (None while there is no table)."""
        found = self._map
        if found is not None and found.version is not None:
            try:
                if found.read(found.version) == self._held:
                    self._forward(found)
                    return TableTransactions(self._table_id, found.version, found.versions)
            except Exception:  # loaded anew, below
                pass
        self._map = None
        table = open_table(self.uri, self.storage_options)
        if table is None:
            return None
        table_id, version = str(table.metadata().id), table.version()
        if RETENTION_PROPERTY in (table.metadata().configuration or {}):
            return TableTransactions(table_id, version, table=table)
        found = AppTransactions(self.uri, self.storage_options)
        try:
            found.at(version)
            self._held = found.read(version)
        except LogNotReplayable:
            return TableTransactions(table_id, version, table=table)
        self._map, self._table_id = found, table_id
        return TableTransactions(table_id, version, found.versions)

    def _forward(self, found: AppTransactions) -> None:
        assert found.version is not None
        while True:
            try:
                text = found.read(found.version + 1)
            except FileNotFoundError:
                return
            if '{"metaData"' in text:
                raise LogNotReplayable("the table's metadata changed")
            found.apply(found.version + 1, text)
            self._held = text


_maps: dict[tuple, AppTransactions] = {}
_maps_lock = threading.Lock()


def transaction_versions(
    table: DeltaTable, app_ids: Iterable[str], storage_options: Mapping[str, str] | None = None
) -> dict[str, int]:
    """The version of each of ``app_ids`` in the snapshot ``table``; ids never set are
    absent. ``storage_options``: the table's (to read its log)."""
    wanted = list(app_ids)
    if not wanted:
        return {}
    known = _replayed(table, storage_options)
    if known is not None:
        return {a: known[a] for a in wanted if a in known}
    return _one_by_one(table, wanted)


def _one_by_one(table: DeltaTable, app_ids: Iterable[str]) -> dict[str, int]:
    """delta-rs' answer for each of ``app_ids``, one call (one log replay) each."""
    out: dict[str, int] = {}
    for app in app_ids:
        found = table.transaction_version(app)
        if found is not None:
            out[app] = int(found)
    return out


def _replayed(table: DeltaTable, storage_options: Mapping[str, str] | None) -> dict | None:
    """The table's map at the snapshot's version, or None (fall back: the module doc)."""
    key: tuple = ()
    try:
        if RETENTION_PROPERTY in (table.metadata().configuration or {}):
            return None
        uri = table.table_uri
        options = tuple(sorted((storage_options or {}).items()))
        key = (uri, str(table.metadata().id), options, threading.get_ident())
        with _maps_lock:
            found = _maps.get(key)
            if found is None:
                if len(_maps) >= MAX_MAPS:
                    _maps.pop(next(iter(_maps)))
                found = _maps[key] = AppTransactions(uri, storage_options)
        if found.unreplayable:
            return None
        return found.at(table.version())
    except LogNotReplayable as exc:
        log.info("transactions of %s: read one id at a time (%s)", table.table_uri, exc)
        with _maps_lock:
            if key in _maps:
                _maps[key].unreplayable = True
        return None
    except Exception as exc:  # reading the log failed: one call per id now, a load next time
        log.debug("transactions of %s: one call per id this time (%s)", table.table_uri, exc)
        with _maps_lock:
            _maps.pop(key, None)
        return None
