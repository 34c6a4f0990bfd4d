"""A Delta table kept open between uses and brought to its newest version before each.

A driver that reads the same table at every batch (the source's safe point asking the sink's
table what it holds; the sink's commit) needs only the commits since it last looked:
:class:`LatestSnapshot` keeps the table and calls ``update_incremental()``, which gives the
table a fresh load would. Before each update it checks that the log still has the commit file
it holds (its size and modification time: one ``stat`` or ``HEAD``), so a table made again at
the same path is loaded anew, as after any error. One object serves one thread at a time
(:meth:`LatestSnapshot.latest` holds a lock while the caller reads). :func:`commits_after`
gives a reader the commits it has not seen.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from spark_groups.storage.delta import open_table
from spark_groups.storage.files import location, table_uri

if TYPE_CHECKING:
    from deltalake import DeltaTable


class LatestSnapshot:
    """The Delta table at ``path``, kept open and brought up to date (see the module doc)."""

    def __init__(self, path: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = table_uri(path)
        self.storage_options = dict(storage_options) if storage_options else None
        self._table: DeltaTable | None = None
        self._held: Any = None  # the size and mtime of the held version's commit file
        self._where: Any = None  # the table's file system, opened at the first check
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def latest(self) -> Iterator[DeltaTable | None]:
        """The table at its newest version (None while there is none), for the block."""
        with self._lock:
            yield self._refresh()

    def _refresh(self) -> DeltaTable | None:
        table = self._table
        if table is not None:
            try:
                held = self._held
                before = table.version()
                if held is not None and self._fingerprint(before) == held:
                    table.update_incremental()
                    if table.version() != before:
                        self._held = self._fingerprint(table.version())
                    return table
            except Exception:  # the table as a fresh load sees it, below
                pass
        self._table = table = open_table(self.uri, self.storage_options)
        self._held = None if table is None else self._fingerprint(table.version())
        return table

    def _fingerprint(self, version: int) -> Any:
        """The size and modification time of commit ``version``'s log file (None: gone)."""
        if self._where is None:
            self._where = location(self.uri, self.storage_options)
        where = self._where
        info = where.fs.get_file_info(where.child(f"_delta_log/{version:020d}.json"))
        return None if info.size is None else (info.size, info.mtime_ns)


def commits_after(
    table: DeltaTable, version: int, limit: int | None = None
) -> list[dict[str, Any]]:
    """The infos of the snapshot ``table``'s commits after ``version`` (of its newest ``limit``
    at most), oldest first."""
    newest = table.version()
    if newest <= version:
        return []
    count = newest - version if limit is None else min(newest - version, limit)
    infos = [c for c in table.history(count) if c.get("version", -1) > version]
    return sorted(infos, key=lambda c: c.get("version", -1))
