"""The sink's table as the group sees it: what it holds, and who may write (the arbiter).

With the source option ``sink.table`` the exactly-once sink's table arbitrates where each
partition stands and which member may still write it (docs/architecture.md, "Handing over
exactly"). The group asks it through :class:`Arbiter` and imports nothing of the sink: the
``delta-group`` sink implements it (``spark_groups.sink.delta_arbiter.DeltaArbiter``) and whoever
builds a :class:`~spark_groups.group.stream.GroupStream` hands it over (the Spark adapter,
``spark_groups.sources.kafka_group``).

Where a partition resumes, when several records disagree, is decided in
``spark_groups.group.resume``; the table's answer here is one of them (the order of
precedence is in docs/architecture.md, "Where a partition resumes").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from spark_groups.offsets import TopicPartition


@dataclass(frozen=True)
class Holdings:
    """One snapshot of the table for some partitions: whether the table ``exists``, the
    next offset it holds per partition (``positions``; absent: never written by the group)
    and the claim token per partition (``claims``; absent: never claimed, 0: released)."""

    exists: bool
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    claims: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Claimed:
    """A claim or release that landed: the table ``version`` it was made on and, per
    partition it covered, the table's position there (absent: never written)."""

    version: int
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    #: Release only: partitions whose claim was no longer this member's (claimed anew).
    not_mine: tuple[TopicPartition, ...] = ()


class Arbiter(Protocol):
    """What the group asks of the sink's table (one group, one table)."""

    #: The table, as resolved (for messages).
    path: str

    def holdings(self, partitions: Iterable[TopicPartition]) -> Holdings:
        """The table's positions and claims for ``partitions``, from one snapshot."""
        ...

    def new_token(self) -> int:
        """A fresh claim token (never the released claim)."""
        ...

    def claim(
        self, partitions: Iterable[TopicPartition], token: int, *, member: str
    ) -> Claimed | None:
        """Claim ``partitions`` under ``token`` and read their positions in the same commit;
        None when the table does not exist yet. Raises
        :class:`~spark_groups.errors.SinkClaimError` when it could not commit in time."""
        ...

    def release(
        self, tokens: Mapping[TopicPartition, int], *, member: str, timeout_s: float
    ) -> Claimed | None:
        """Release the partitions still claimed with their token in ``tokens``; the positions
        read in that commit are final for every batch planned under those tokens. None when
        the table does not exist. Raises :class:`~spark_groups.errors.SinkClaimError`."""
        ...
