"""The exception hierarchy of spark_groups.

Every error the library raises on purpose is a :class:`SparkGroupsError`, so callers can
catch one type. Messages name the option, broker, topic or record at fault and never
contain secrets (see :func:`spark_groups.kafka.secrets.redact`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # offsets imports this module
    from spark_groups.offsets import TopicPartition


class SparkGroupsError(Exception):
    """Base class of every error raised by spark_groups."""


class OptionError(SparkGroupsError, ValueError):
    """An option is missing, unknown, malformed or conflicts with another one."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(f"option '{option}': {problem}")


class BrokerUnreachableError(SparkGroupsError):
    """No broker of ``kafka.bootstrap.servers`` answered within the allowed time."""


class TopicNotFoundError(SparkGroupsError):
    """A subscribed topic does not exist on the cluster."""


class GroupMembershipError(SparkGroupsError):
    """The driver's consumer-group member failed (could not join, was closed, or crashed)."""


class CommitError(SparkGroupsError):
    """Offsets of a finished batch could not be committed to the ledger or to Kafka."""


class StaleGenerationError(CommitError):
    """Kafka refused an offset commit because this member's generation is no longer current.

    ``generation`` is the member's generation at the commit, ``partitions`` those it tried to
    commit, and ``code`` the Kafka error code of the refusal (None when unknown).
    """

    def __init__(
        self,
        message: str,
        *,
        generation: int = -1,
        partitions: Iterable[TopicPartition] = (),
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.generation = generation
        self.partitions = frozenset(partitions)
        self.code = code


class LedgerError(SparkGroupsError):
    """The Delta offsets ledger is unusable (wrong table, wrong group, unreadable)."""

    #: The source option that names the ledger's path.
    option = "offsets.table"


class DataLossError(SparkGroupsError):
    """Records in a planned offset range can no longer be read (deleted, or the log moved).

    ``partition`` and ``[from_offset, until_offset)`` are the records lost, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        partition: TopicPartition | None = None,
        from_offset: int | None = None,
        until_offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset


class SinkError(SparkGroupsError):
    """The exactly-once Delta sink (``delta-group``) cannot write a batch: bad options, a
    pipeline without the source's ``topic``/``partition``/``offset`` columns, rows outside
    the batch's planned offsets, a data file missing before the commit, an incompatible table,
    or a commit that kept failing on concurrent commits. Nothing of the batch was committed."""


class SinkGapError(SinkError):
    """A batch starts past the offset the sink table expects for a partition: committing it
    would leave records that were never written (a gap) in the table.

    ``gaps`` maps each such partition to its missing offsets ``(table's next, batch's from)``.
    """

    def __init__(
        self, message: str, *, gaps: Mapping[TopicPartition, tuple[int, int]] | None = None
    ) -> None:
        super().__init__(message)
        self.gaps = dict(gaps or {})


class GroupActiveError(SparkGroupsError):
    """An operation that needs an empty consumer group (``spark-groups reset``) found the
    group with active members; stop every member (every query and consumer) first."""
