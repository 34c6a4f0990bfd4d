"""The progress of one range of a task: where its read stands, and how messages name it."""

from __future__ import annotations

from collections.abc import Sequence

from spark_groups.offsets import OffsetRange


class RangeState:
    """The progress of one range of a task (``index``: its place among the task's ranges)."""

    __slots__ = (
        "done",
        "from_offset",
        "index",
        "last_progress",
        "next_offset",
        "partition",
        "rng",
        "topic",
        "until",
    )

    def __init__(self, rng: OffsetRange, index: int) -> None:
        self.rng = rng
        self.index = index
        self.topic = rng.topic
        self.partition = rng.partition
        self.from_offset = rng.from_offset
        self.until = rng.until_offset
        self.next_offset = rng.from_offset
        self.done = False
        self.last_progress = 0.0

    def __str__(self) -> str:
        return f"{self.rng.topic_partition} [{self.from_offset}, {self.until})"


def describe(states: Sequence[RangeState]) -> str:
    """A task's ranges, for messages: the range, or how many and the first few."""
    if len(states) == 1:
        return str(states[0])
    shown = ", ".join(str(s) for s in states[:3])
    more = f", ... ({len(states)} ranges)" if len(states) > 3 else ""
    return shown + more
