"""``spark-groups accept-gap``: a partition's missing records stay out of the sink's table.

The operator's decision is recorded in the sink table (a commit without data files,
:func:`spark_groups.sink.accepted_gaps.accept_gap`) and, with ``--offsets-table``, in the
ledger as a row of offsets committed outside spark_groups (``batch`` -3, ``member_id``
``accept-gap:user@host``). Members holding the partition read on within seconds; a batch the
sink refused commits after a restart.
"""

from __future__ import annotations

import getpass
import socket
from datetime import UTC, datetime

from spark_groups.ledger import OUTSIDE_BATCH, LedgerRow, OffsetLedger
from spark_groups.sink.accepted_gaps import AcceptedGap, accept_gap
from spark_groups.tools.timeline import parse_partition


def operator() -> str:
    """Who accepts: ``accept-gap:<user>@<host>`` (never a secret)."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"accept-gap:{user}@{socket.gethostname()}"


def run_accept_gap(
    group: str,
    sink_table: str,
    partition: str,
    until: int,
    offsets_table: str | None,
    reason: str = "",
    storage_options: dict[str, str] | None = None,
) -> AcceptedGap:
    """Accept the gap of ``partition`` (``TOPIC:P``) in ``sink_table`` up to ``until`` for
    ``group``, and record it in the ledger at ``offsets_table`` when given; both tables are
    opened with ``storage_options`` (delta-rs' names)."""
    tp = parse_partition(partition)
    by = operator()
    done = accept_gap(sink_table, group, tp, until, by, reason, storage_options)
    if done.version is not None and offsets_table:
        OffsetLedger(offsets_table, group, storage_options).append(
            [
                LedgerRow(
                    topic=tp.topic,
                    partition=tp.partition,
                    from_offset=done.table_offset,
                    until_offset=until,
                    member_id=by,
                    generation=-1,
                    batch=OUTSIDE_BATCH,
                    committed_at=datetime.now(UTC),
                )
            ]
        )
    return done
