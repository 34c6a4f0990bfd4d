"""The Delta offsets ledger: which offset ranges a consumer group has processed.

* :mod:`~spark_groups.ledger.offset_ledger`: :class:`OffsetLedger`, the ledger's API; its parts:
  :mod:`~spark_groups.ledger.rows` (schema, special batches, valid rows),
  :mod:`~spark_groups.ledger.store` (the table: opened, validated, created),
  :mod:`~spark_groups.ledger.append` (one append, retried on concurrent commits),
  :mod:`~spark_groups.ledger.queries` (positions, history, last batch) and
  :mod:`~spark_groups.ledger.positions` (positions replayed over a history);
* :mod:`~spark_groups.ledger.retention`: old rows deleted, positions kept;
* :mod:`~spark_groups.ledger.self_maintenance`: compaction, vacuum, checkpoints, log clean-up.
"""

from spark_groups.ledger.offset_ledger import (
    CATCH_UP_BATCH,
    GROUP_ID_KEY,
    LEDGER_SCHEMA,
    OUTSIDE_BATCH,
    RESET_BATCH,
    LedgerRow,
    OffsetLedger,
    positions_over_time,
    rows_with_positions,
)

__all__ = [
    "CATCH_UP_BATCH",
    "GROUP_ID_KEY",
    "LEDGER_SCHEMA",
    "OUTSIDE_BATCH",
    "RESET_BATCH",
    "LedgerRow",
    "OffsetLedger",
    "positions_over_time",
    "rows_with_positions",
]
