"""Partitions held back because the exactly-once sink's table would get a gap.

With the source option ``sink.table``, a newly assigned partition whose resume position is
past where the sink's table ends (its transaction version) is checked before it is read:

* the records in between were committed in Kafka by another consumer of the group (a
  :class:`~spark_groups.offsets.Handover` that explains the gap): read on; the batch carries
  the handover and the sink accepts exactly that gap;
* otherwise nothing accounts for those records (loss, a restored table, ...): the partition
  is **held**. This member keeps it and reads its other partitions; the held partition is
  not planned, so no batch fails and no member crashes on it, one after another. Its lag
  grows (alert on it), the log names the partition, the range, who committed the position
  and the command that resolves it; every :data:`RECHECK_S` seconds the sink is read again
  and the partition is released once the table reaches its position (``spark-groups
  accept-gap``, see docs/sink.md).

:func:`unexplained` is the pure decision; :class:`Held` is what is logged and shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_groups.offsets import Handover, TopicPartition

#: How often (seconds) held partitions are checked against the sink's table again.
RECHECK_S = 5.0


@dataclass(frozen=True)
class Held:
    """A partition held back: the sink's table ends at ``table_offset``, the group resumes
    at ``position`` (committed by ``committed_by``)."""

    partition: TopicPartition
    table_offset: int
    position: int
    committed_by: str

    def message(self, group_id: str, sink_path: str, ledger_path: str | None) -> str:
        """The operator's message: what is missing, who committed, and what to run."""
        tp = self.partition
        command = (
            f"spark-groups accept-gap {group_id} --sink-table {sink_path} "
            f"--partition {tp.topic}:{tp.partition} --until {self.position}"
            + (f" --offsets-table {ledger_path}" if ledger_path else "")
        )
        return (
            f"{tp}: the sink table {sink_path} holds offsets up to {self.table_offset}, the "
            f"group resumes at {self.position} (committed by {self.committed_by}); nothing "
            f"accounts for the records [{self.table_offset}, {self.position}) (not committed by "
            f"another consumer of the group past where spark_groups stood). Holding {tp}: it "
            "is not read until this is resolved; the other partitions go on. If those records "
            f"may be left out of the table, run: {command}. To read them into the table "
            f"instead (while Kafka still has them), stop the group's members and run: "
            f"spark-groups reset {group_id} --to 'offsets-json:"
            f'{{"{tp.topic}": {{"{tp.partition}": {self.table_offset}}}}}\' (with -b and '
            "--offsets-table as for describe)"
        )


def unexplained(
    positions: Mapping[TopicPartition, int],
    table: Mapping[TopicPartition, int],
    handovers: Mapping[TopicPartition, Handover],
    committed_by: Mapping[TopicPartition, str],
) -> dict[TopicPartition, Held]:
    """The partitions of ``positions`` (where each resumes) that the sink's ``table``
    (next offset per partition) ends before, with no handover explaining the difference."""
    out: dict[TopicPartition, Held] = {}
    for tp, position in sorted(positions.items()):
        offset = table.get(tp)
        if offset is None or offset >= position:
            continue
        handover = handovers.get(tp)
        if handover is not None and handover.explains(offset, position):
            continue
        who = committed_by.get(tp, "spark_groups (its ledger)")
        out[tp] = Held(tp, offset, position, who)
    return out


def released(
    held: Mapping[TopicPartition, Held], table: Mapping[TopicPartition, int]
) -> Iterable[TopicPartition]:
    """The held partitions the sink's ``table`` has reached meanwhile."""
    return [tp for tp, h in held.items() if table.get(tp, -1) >= h.position]
