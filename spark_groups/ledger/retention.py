"""Retention of the offsets ledger: old rows go, every position stays.

:func:`expire` deletes, in one Delta ``DELETE``, the rows committed before a cutoff that no
position depends on. Per partition it keeps the newest reset marker and, after it, the rows
holding the highest ``until_offset`` of all rows and of the group's own rows (without
:data:`~spark_groups.ledger.rows.OUTSIDE_BATCH` rows, for ``own_only``). Rows that running
members append meanwhile are newer than the cutoff and only raise the maxima, so expiring
beside them is safe; a delete that conflicts with a concurrent commit is skipped until the
next maintenance. docs/offsets.md, "Retention".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_groups.ledger.rows import OUTSIDE_BATCH, RESET_BATCH
from spark_groups.offsets import TopicPartition
from spark_groups.storage.delta import sql_string, sql_timestamp

if TYPE_CHECKING:
    from spark_groups.ledger.offset_ledger import OffsetLedger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Keep:
    """What one partition must keep: its newest reset marker's time and the maxima after it."""

    reset_at: datetime | None
    max_all: int
    max_own: int | None


def _keeps(history: pa.Table, reset_batch: int, outside_batch: int) -> dict[TopicPartition, _Keep]:
    rows = history.to_pylist()
    resets: dict[TopicPartition, datetime] = {}
    for r in rows:
        if r["batch"] == reset_batch:
            tp = TopicPartition(r["topic"], r["partition"])
            resets[tp] = max(resets.get(tp, r["committed_at"]), r["committed_at"])
    max_all: dict[TopicPartition, int] = {}
    max_own: dict[TopicPartition, int] = {}
    for r in rows:
        tp = TopicPartition(r["topic"], r["partition"])
        reset_at = resets.get(tp)
        after = reset_at is None or r["committed_at"] > reset_at
        if not after and not (r["batch"] == reset_batch and r["committed_at"] == reset_at):
            continue
        max_all[tp] = max(max_all.get(tp, r["until_offset"]), r["until_offset"])
        if r["batch"] != outside_batch:
            max_own[tp] = max(max_own.get(tp, r["until_offset"]), r["until_offset"])
    return {tp: _Keep(resets.get(tp), top, max_own.get(tp)) for tp, top in max_all.items()}


def _delete_terms(
    keeps: dict[TopicPartition, _Keep], cutoff: datetime, reset_batch: int, outside_batch: int
) -> Iterator[str]:
    """One SQL term per partition: its rows older than ``cutoff`` that may go."""
    for tp, keep in sorted(keeps.items()):
        own = "TRUE" if keep.max_own is None else f'"until_offset" < {keep.max_own}'
        replaceable = (
            f'("batch" <> {reset_batch} AND "until_offset" < {keep.max_all} '
            f'AND ("batch" = {outside_batch} OR {own}))'
        )
        before_reset = (
            "FALSE" if keep.reset_at is None else f'"committed_at" < {sql_timestamp(keep.reset_at)}'
        )
        yield (
            f'("topic" = {sql_string(tp.topic)} AND "partition" = {tp.partition} '
            f'AND "committed_at" < {sql_timestamp(cutoff)} AND ({before_reset} OR {replaceable}))'
        )


def expire(ledger: OffsetLedger, cutoff: datetime) -> int:
    """Delete ``ledger``'s rows committed before ``cutoff`` (timezone-aware) that no position
    depends on (see the module documentation); return how many rows were deleted. Any
    failure is logged and returns 0: the rows stay for the next run."""
    import pyarrow.compute as pc  # not at import: the reader process starts without it

    try:
        history = ledger.history()
        at = history.column("committed_at")
        if pc.sum(pc.less(at, pa.scalar(cutoff, at.type))).as_py() in (None, 0):
            return 0
        keeps = _keeps(history, RESET_BATCH, OUTSIDE_BATCH)
        terms = list(_delete_terms(keeps, cutoff, RESET_BATCH, OUTSIDE_BATCH))
        group = f'"group_id" = {sql_string(ledger.group_id)}'
        predicate = f"{group} AND ({' OR '.join(terms)})"
        deleted = ledger.delete_where(predicate)
    except Exception as exc:  # maintenance: never fail the caller's commit
        log.warning("ledger %s: retention skipped this time: %s", ledger.path, exc)
        return 0
    if deleted:
        log.info(
            "ledger %s: deleted %d row(s) committed before %s (positions unchanged)",
            ledger.path,
            deleted,
            cutoff.isoformat(),
        )
    return deleted
