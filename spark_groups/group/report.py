"""What the reader reports to Spark with each batch: the log ends and the coordinator metrics."""

from __future__ import annotations

from typing import Any

from spark_groups import metrics as coordinator_metrics
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.group.member import GroupMember
from spark_groups.metrics import StreamMetrics


def latest_report(
    member: GroupMember, books: Bookkeeping, metrics: StreamMetrics
) -> dict[str, Any]:
    """The log ends seen by the last plan, in the JSON shape of Spark's kafka source, and the
    coordinator metrics under ``metrics.METRICS_KEY`` (docs/metrics.md)."""
    with books.lock:
        committed = books.partitions.committed_offsets()
        planned = books.partitions.plannable(member.assignment)
    counters = coordinator_metrics.snapshot(
        metrics,
        member_id=member.member_id,
        generation=member.generation,
        assignment=member.assignment,
        rebalances=member.rebalances,
        log_ends=books.log_ends,
        committed=committed,
        planned=planned,
    )
    return coordinator_metrics.latest_offset_json(books.log_ends, counters)
