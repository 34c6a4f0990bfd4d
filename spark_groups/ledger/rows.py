"""The ledger's rows: the table's schema, the special batch numbers, and what a valid row is.

One row per partition of each committed batch (:data:`LEDGER_SCHEMA`); every column but
``log_end`` is non-nullable. ``log_end`` is the partition's log end the member saw at the
commit (``log_end - until_offset`` is the lag at commit time); it is null for rows that are no
batch's and for rows written before the column existed (such a ledger gets the column by a
schema merge at its next append). Rows with a negative ``batch`` (generation ``-1``) are no
batch's: :data:`CATCH_UP_BATCH`, :data:`RESET_BATCH` (a reset marker, whose range may run
backwards) and :data:`OUTSIDE_BATCH`. docs/cli.md, "history".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from spark_groups.offsets import TopicPartition

#: The Arrow schema of the ledger table (column order as stored).
LEDGER_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("from_offset", pa.int64(), nullable=False),
        pa.field("until_offset", pa.int64(), nullable=False),
        pa.field("member_id", pa.string(), nullable=False),
        pa.field("generation", pa.int32(), nullable=False),
        pa.field("batch", pa.int64(), nullable=False),
        pa.field("committed_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("log_end", pa.int64(), nullable=True),
    ]
)
#: The schema of ledgers written before ``log_end`` existed (still read and appended to).
SCHEMA_WITHOUT_LOG_END = pa.schema([f for f in LEDGER_SCHEMA if f.name != "log_end"])

_INT32_MAX = 2**31 - 1

#: The ``batch`` of a row recording that a new owner caught the group up with the
#: exactly-once sink's offsets (no batch of this query read that range).
CATCH_UP_BATCH = -1
#: The ``batch`` of a *reset marker*: an operator set the group's position (``spark-groups
#: reset``). Its ``from_offset`` is the position before the reset, its ``until_offset`` the
#: new one (which may be lower: a reset marker is the only row whose range may run backwards).
RESET_BATCH = -2
#: The ``batch`` of a row recording offsets committed outside spark_groups (by another
#: consumer of the group, or accepted by an operator with ``spark-groups accept-gap``).
OUTSIDE_BATCH = -3


@dataclass(frozen=True)
class LedgerRow:
    """One committed offset range: partition ``topic``/``partition`` read ``[from, until)``.

    ``member_id`` and ``generation`` identify the group member (and its group generation)
    that committed the batch numbered ``batch`` (:data:`CATCH_UP_BATCH` for a catch-up with
    the exactly-once sink, :data:`RESET_BATCH` for a reset marker); ``committed_at`` must be
    timezone-aware (it is stored in UTC). ``log_end`` is the log end offset seen at commit
    time (None when unknown).
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    member_id: str
    generation: int
    batch: int
    committed_at: datetime
    log_end: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition this row belongs to."""
        return TopicPartition(self.topic, self.partition)


def invalid_row(rows: Sequence[LedgerRow]) -> str | None:
    """Why ``rows`` (the rows of one commit) cannot be stored: ``invalid row ...: problem``
    for the first bad row, or ``None``."""
    seen: set[tuple[str, int, int]] = set()
    for row in rows:
        problem = _row_problem(row)
        if problem is None:
            key = (row.topic, row.partition, row.batch)
            if key in seen:
                problem = "the same partition appears twice for one batch"
            seen.add(key)
        if problem is not None:
            return f"invalid row {row!r}: {problem}"
    return None


def to_arrow(group_id: str, rows: Sequence[LedgerRow]) -> pa.Table:
    """The Arrow table (schema :data:`LEDGER_SCHEMA`) of ``rows`` of group ``group_id``
    (valid rows: :func:`invalid_row`)."""
    columns = {
        "group_id": [group_id] * len(rows),
        "topic": [r.topic for r in rows],
        "partition": [r.partition for r in rows],
        "from_offset": [r.from_offset for r in rows],
        "until_offset": [r.until_offset for r in rows],
        "member_id": [r.member_id for r in rows],
        "generation": [r.generation for r in rows],
        "batch": [r.batch for r in rows],
        "committed_at": [r.committed_at for r in rows],  # Arrow converts to UTC
        "log_end": [r.log_end for r in rows],
    }
    return pa.Table.from_pydict(columns, schema=LEDGER_SCHEMA)


def _row_problem(row: LedgerRow) -> str | None:
    """Why ``row`` cannot be stored, or ``None``."""
    if not isinstance(row, LedgerRow):
        return f"expected a LedgerRow, got {type(row).__name__}"
    if not isinstance(row.topic, str) or not row.topic:
        return "topic must be a non-empty string"
    if not isinstance(row.member_id, str):
        return "member_id must be a string"
    for name in ("partition", "from_offset", "until_offset", "generation", "batch"):
        value = getattr(row, name)
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name} must be an int"
    if not 0 <= row.partition <= _INT32_MAX:
        return "partition must be in [0, 2**31)"
    if not -(2**31) <= row.generation <= _INT32_MAX:
        return "generation must fit in 32 bits"
    if row.batch < OUTSIDE_BATCH:
        return f"batch must be >= {OUTSIDE_BATCH}"
    if row.batch == RESET_BATCH:
        if min(row.from_offset, row.until_offset) < 0:
            return "a reset marker's offsets must be >= 0"
    elif not 0 <= row.from_offset <= row.until_offset:
        return "offsets must satisfy 0 <= from_offset <= until_offset"
    if not isinstance(row.committed_at, datetime) or row.committed_at.utcoffset() is None:
        return "committed_at must be a timezone-aware datetime"
    return None
