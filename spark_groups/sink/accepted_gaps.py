"""Accepting a gap: an operator's decision, recorded in the sink's table, to leave records out.

``spark-groups accept-gap`` calls :func:`accept_gap` for a partition held (or a batch
refused) because the table ends before where the group resumes. One Delta commit with no data
files moves the partition's transaction version from the table's offset ``v`` to ``until``
and says so in the commit info (``spark_groups.accepted_gap``, ``spark_groups.member``,
``spark_groups.reason``). It is made on the snapshot ``v`` was read from, so a member that
commits the partition meanwhile wins and the decision is made again. docs/sink.md, "Gaps:
mixed groups and `accept-gap`".
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from spark_groups.errors import OptionError, SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.sink.sink_table import app_id, append_files, load, versions
from spark_groups.storage.files import table_uri

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.sink.gaps")

#: How many characters of ``--reason`` are kept in the commit info.
MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class AcceptedGap:
    """The outcome of :func:`accept_gap`: the table's offset before (``table_offset``),
    ``until``, and the table version of the commit (None: nothing to do, the table already
    reaches ``until``)."""

    partition: TopicPartition
    table_offset: int
    until: int
    version: int | None


def accept_gap(
    table_path: str,
    group_id: str,
    tp: TopicPartition,
    until: int,
    by: str,
    reason: str = "",
    storage_options: dict[str, str] | None = None,
) -> AcceptedGap:
    """Record in the sink table at ``table_path`` that ``group_id``'s records of ``tp``
    from the table's current offset up to ``until`` are left out (see the module doc).

    Raises :class:`~spark_groups.errors.SinkError` when the table does not exist, holds
    nothing of ``tp`` for the group (no gap can arise there), or keeps changing under
    concurrent commits; :class:`~spark_groups.errors.OptionError` for a negative ``until``.
    """
    from deltalake import Transaction
    from deltalake.exceptions import CommitFailedError

    if until < 0:
        raise OptionError("--until", f"must be an offset >= 0, got {until}")
    uri = table_uri(table_path)
    for _attempt in range(10):
        table = load(uri, storage_options)
        if table is None:
            raise SinkError(f"sink table {table_path}: there is no Delta table there")
        offset = versions(table, group_id, [tp], storage_options).get(tp)
        if offset is None:
            raise SinkError(
                f"sink table {table_path}: group {group_id!r} has written nothing of {tp} "
                "there, so it has no gap to accept (check --partition and the group)"
            )
        if offset >= until:
            log.info("sink %s: %s already reaches %d (>= %d)", table_path, tp, offset, until)
            return AcceptedGap(tp, offset, until, None)
        info = {
            "spark_groups.group": group_id,
            "spark_groups.member": by,
            "spark_groups.accepted_gap": json.dumps(
                {tp.topic: {str(tp.partition): [offset, until]}}, separators=(",", ":")
            ),
            "spark_groups.reason": reason[:MAX_REASON_CHARS],
        }
        txns = [Transaction(app_id(str(table.metadata().id), group_id, tp), until)]
        try:
            append_files(table, [], tuple(table.metadata().partition_columns), txns, info)
        except CommitFailedError:
            continue  # a member committed meanwhile: decide again on the new snapshot
        after = load(uri, storage_options)
        version = after.version() if after is not None else None
        log.info(
            "sink %s: %s: accepted the gap [%d, %d) (by %s) as version %s",
            table_path,
            tp,
            offset,
            until,
            by,
            version,
        )
        return AcceptedGap(tp, offset, until, version)
    raise SinkError(
        f"sink table {table_path}: {tp} kept changing under concurrent commits; run again"
    )
