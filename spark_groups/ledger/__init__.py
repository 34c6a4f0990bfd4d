"""The Delta offsets ledger: which offset ranges a consumer group has processed.

* :mod:`~spark_groups.ledger.table`: :class:`OffsetLedger`, appends and reads of the table;
* :mod:`~spark_groups.ledger.maintenance`: compaction, vacuum, checkpoints, log clean-up.
"""

from spark_groups.ledger.table import (
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
