"""What a share commit says of itself in its commit info, and the offsets recent ones wrote.

A share commit names the task attempts whose files it holds (:data:`COMMIT_INFO_KEY`, which
the readers' acknowledgers look for) and the offsets it wrote (:data:`COMMIT_OFFSETS_KEY`).
:class:`RecentOffsets` keeps the offsets of the table's newest ``window`` commits and answers
which of a batch's are there already: a redelivered record is left out. The window counts
commits, not time, so it does not move while the query is down; its cost is the window's,
never the table's.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.spark.task_context import TaskAttempt
from spark_groups.storage.snapshots import commits_after

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: The key of a share commit's info that lists the task attempts it committed:
#: ``{"run": run id, "batch": batch id, "attempts": [task attempt id, ...]}``.
COMMIT_INFO_KEY = "spark_groups.share.attempts"
#: The key of a share commit's info that lists the offsets it wrote.
COMMIT_OFFSETS_KEY = "spark_groups.share.offsets"
#: How many of the table's newest commits are searched, by default.
DEFAULT_WINDOW = 1000


def commit_info(attempts: Iterable[TaskAttempt]) -> dict[str, str]:
    """The sink commit's info entry naming ``attempts`` (all of one run and batch)."""
    attempts = sorted(set(attempts))
    if not attempts:
        return {}
    runs = {(a.run_id, a.batch_id) for a in attempts}
    if len(runs) != 1:
        raise ValueError(f"one commit holds one run's batch, not {sorted(runs)}")
    ((run_id, batch_id),) = runs
    value = {"run": run_id, "batch": batch_id, "attempts": [a.attempt_id for a in attempts]}
    return {COMMIT_INFO_KEY: json.dumps(value, separators=(",", ":"))}


def committed_attempts(info: Mapping[str, object]) -> tuple[str, int, frozenset[int]] | None:
    """From one commit's info: its run id, batch id and committed task attempt ids; None
    for a commit that is not a share batch's."""
    text = info.get(COMMIT_INFO_KEY)
    if not isinstance(text, str):
        return None
    value = json.loads(text)
    return str(value["run"]), int(value["batch"]), frozenset(int(a) for a in value["attempts"])


def commit_offsets_info(offsets: PartitionOffsets) -> dict[str, str]:
    """The commit info entry of a share commit that wrote ``offsets``."""
    return {COMMIT_OFFSETS_KEY: json.dumps(offsets.to_json(), separators=(",", ":"))}


class RecentOffsets:
    """The offsets written by the share commits among the table's newest ``window`` commits,
    brought up to date by :meth:`refresh` (which reads only the commits since the last)."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        """Empty until the first :meth:`refresh`."""
        if window < 1:
            raise ValueError(f"window must be at least 1 commit, not {window}")
        self.window = window
        self._commits: deque[tuple[int, PartitionOffsets]] = deque()
        self._batches: deque[tuple[int, tuple[str, int]]] = deque()
        self._seen = -1

    def refresh(self, table: DeltaTable) -> None:
        """Take in the commits of the snapshot ``table`` made since the last refresh."""
        newest = table.version()
        if newest <= self._seen:
            return
        for info in commits_after(table, self._seen, self.window):
            version = info["version"]
            text = info.get(COMMIT_OFFSETS_KEY)
            if isinstance(text, str):
                self._commits.append((version, PartitionOffsets.from_json(json.loads(text))))
            named = committed_attempts(info)
            if named is not None:
                self._batches.append((version, named[:2]))
        self._seen = newest
        for kept in (self._commits, self._batches):
            while kept and kept[0][0] <= newest - self.window:
                kept.popleft()

    def has_batch(self, run_id: str, batch_id: int) -> bool:
        """Whether a commit in the window holds batch ``batch_id`` of run ``run_id``."""
        return any(named == (run_id, batch_id) for _, named in self._batches)

    def already_written(self, offsets: PartitionOffsets) -> PartitionOffsets:
        """The ones of ``offsets`` that a commit in the window wrote."""
        found = PartitionOffsets()
        for _, written in self._commits:
            found = found | (written & offsets)
        return found
