"""An idle member: in the group, with no partitions (the group has more members than
partitions). Idle is healthy: such a member plans nothing, keeps its place in the group and
takes partitions over when another member leaves. The ``idle`` coordinator metric
(``spark_groups.metrics``) says so at every progress; :class:`IdleNote` logs each change once.
"""

from __future__ import annotations

import logging
from collections.abc import Set

from spark_groups.offsets import TopicPartition

log = logging.getLogger(__name__)


class IdleNote:
    """Logs when a member of ``group_id`` becomes idle, and when it is not any more."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.idle = False

    def note(self, assignment: Set[TopicPartition]) -> None:
        """Log a change of idleness, given the member's current ``assignment``."""
        idle = not assignment
        if idle == self.idle:
            return
        self.idle = idle
        if idle:
            log.info(
                "this member of group %s owns no partitions (more members than partitions): "
                "idle until the group gives it some",
                self.group_id,
            )
        else:
            log.info("this member of group %s owns partitions again", self.group_id)
