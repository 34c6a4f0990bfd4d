"""The ``delta-group`` table as the group's arbiter (``spark_groups.group.arbiter``).

:class:`DeltaArbiter` answers the group's questions about one table and one consumer group
with the sink's own modules: the positions (``spark_groups.sink.sink_table``) and the claims
(``spark_groups.sink.claim_tokens``). :func:`for_source` builds it for a ``kafka-group`` source
with ``sink.table``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from spark_groups.group.arbiter import Claimed, Holdings
from spark_groups.offsets import TopicPartition
from spark_groups.options import SourceOptions
from spark_groups.sink import claim_tokens
from spark_groups.sink.sink_table import app_id
from spark_groups.storage.transactions import LatestTransactions


class DeltaArbiter:
    """The delta-group table at ``path`` for consumer group ``group_id`` (an
    :class:`~spark_groups.group.arbiter.Arbiter`)."""

    def __init__(
        self, path: str, group_id: str, storage_options: Mapping[str, str] | None = None
    ) -> None:
        self.path = path
        self.group_id = group_id
        self.storage_options = dict(storage_options) if storage_options else None
        # Asked at every safe point: only the transactions of the commits since the last time.
        self._transactions = LatestTransactions(path, self.storage_options)

    def holdings(self, partitions: Iterable[TopicPartition]) -> Holdings:
        """The table's positions and claims for ``partitions`` from its newest snapshot."""
        wanted = sorted(set(partitions))
        found = self._transactions.latest()
        if found is None:
            return Holdings(exists=False)
        positions = {app_id(found.table_id, self.group_id, tp): tp for tp in wanted}
        tokens = {claim_tokens.claim_app_id(found.table_id, self.group_id, tp): tp for tp in wanted}
        return Holdings(
            True,
            {positions[a]: v for a, v in found.of(positions).items()},
            {tokens[a]: v for a, v in found.of(tokens).items()},
        )

    def new_token(self) -> int:
        """A fresh claim token."""
        return claim_tokens.new_token()

    def claim(
        self, partitions: Iterable[TopicPartition], token: int, *, member: str
    ) -> Claimed | None:
        """Claim ``partitions`` under ``token`` (``spark_groups.sink.claim_tokens.claim``)."""
        return claim_tokens.claim(
            self.path,
            self.group_id,
            partitions,
            token,
            storage_options=self.storage_options,
            member=member,
        )

    def release(
        self, tokens: Mapping[TopicPartition, int], *, member: str, timeout_s: float
    ) -> Claimed | None:
        """Release the partitions still held with ``tokens``
        (``spark_groups.sink.claim_tokens.release``)."""
        return claim_tokens.release(
            self.path,
            self.group_id,
            tokens,
            storage_options=self.storage_options,
            member=member,
            timeout_s=timeout_s,
        )


def for_source(options: SourceOptions) -> DeltaArbiter | None:
    """The arbiter of a ``kafka-group`` source: its ``sink.table`` for its ``group.id``
    (None without ``sink.table``)."""
    if options.sink_path is None:
        return None
    return DeltaArbiter(options.sink_path, options.group_id, options.storage_options)
