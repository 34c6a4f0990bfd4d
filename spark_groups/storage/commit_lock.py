"""One commit at a time per table in this process, where the table takes one writer only.

On a table committed to as check-then-rename (``allow_unsafe_rename``,
``aws_s3_allow_unsafe_rename``: :func:`~spark_groups.storage.object_stores.one_writer_opt_in`)
two commits of one process could race as two members would: the batch's commit, the sink's
claims and leases, the upkeep's compaction, the ledger's appends. :func:`commits_of` gives
such a table one lock per process that each of them holds around its commit; elsewhere
delta-rs' own atomic commits order them and it holds nothing. The group holds the table to one
process (``spark_groups.group.one_writer``). docs/storage.md, "One writer".
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from spark_groups.storage.object_stores import one_writer_opt_in
from spark_groups.storage.paths import resolve

_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def commits_of(table: Any) -> AbstractContextManager[object]:
    """What a commit to ``table`` (a deltalake ``DeltaTable``) holds: its process-wide lock
    where the table takes one writer only, else nothing."""
    uri = str(table.table_uri)
    options = getattr(table, "_storage_options", None) or {}
    if one_writer_opt_in(uri, options) is None:
        return nullcontext()
    key = resolve(uri, "path").rstrip("/")
    with _GUARD:
        return _LOCKS.setdefault(key, threading.Lock())
