"""A batch's data files on the driver, from its tasks to the commit that references them.

The tasks of a batch write their files below the table before the batch commits
(``spark_groups.sink.writer``); until a commit references them they are *staged*.
:class:`StagedFiles` checks them before anything is committed (every row inside its
partition's planned range, every file in storage with the size its task reported), *cuts*
them where the table already holds a partition's first rows (files entirely below the
table's offset are left out, a file straddling it is rewritten without those rows, once per
batch however often the commit is tried), and finally deletes every staged file and rewrite
that the commit does not reference (all of them when nothing commits).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from spark_groups.errors import SinkError
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.table import SinkTable
from spark_groups.sink.writer import DataFile, remove_files, rewrite_from
from spark_groups.storage.files import location

log = logging.getLogger(__name__)


class StagedFiles:
    """The ``files`` one batch's tasks wrote below ``table``, and the driver's rewrites of
    them (written with ``compression``)."""

    def __init__(self, table: SinkTable, files: Iterable[DataFile], compression: str) -> None:
        """Take charge of ``files``; nothing is read or written until a method is called."""
        self.table = table
        self.files = list(files)
        self.compression = compression
        #: Paths of the files the driver wrote (rewrites), deleted unless committed.
        self.made: set[str] = set()
        self._rewrites: dict[tuple[str, int], DataFile | None] = {}

    def __repr__(self) -> str:
        return f"StagedFiles({self.table.path!r}, {len(self.files)} file(s))"

    def check(self, plan: BatchPlan) -> None:
        """Refuse (:class:`~spark_groups.errors.SinkError`) files whose rows lie outside
        their partition's range in ``plan``, a file listed twice, and files missing from
        storage or not of the size their task reported."""
        self._check_against_plan(plan)
        self._check_exist()

    def cut(self, files: list[DataFile], version: int) -> list[DataFile]:
        """``files`` (of one partition) without the rows below ``version`` (already in the
        table): files entirely below it are left out, a file straddling it is replaced by
        its rewrite from ``version`` (made once per file and version)."""
        kept = []
        for f in files:
            if f.min_offset >= version:
                kept.append(f)
            elif f.max_offset >= version:
                key = (f.path, version)
                if key not in self._rewrites:
                    self._rewrites[key] = rewrite_from(
                        self.table.uri, f, version, self.compression, self.table.storage_options
                    )
                    if self._rewrites[key] is not None:
                        self.made.add(self._rewrites[key].path)  # type: ignore[union-attr]
                    log.info(
                        "sink %s: %s straddles the table's offset %d; rewrote it without the "
                        "rows already there",
                        self.table.path,
                        f.path,
                        version,
                    )
                replacement = self._rewrites[key]
                if replacement is not None:
                    kept.append(replacement)
        return kept

    def remove(self, keep: Iterable[str] = ()) -> None:
        """Delete the batch's files and the driver's rewrites, except the paths in ``keep``
        (those the commit references)."""
        kept = set(keep)
        doomed = [f.path for f in self.files if f.path not in kept]
        doomed += [p for p in self.made if p not in kept]
        if doomed:
            remove_files(self.table.uri, doomed, self.table.storage_options)

    def _check_against_plan(self, plan: BatchPlan) -> None:
        """Every file's rows must lie in the planned range of their partition."""
        for f in self.files:
            planned = plan.ranges.get(f.topic_partition)
            if planned is None:
                raise SinkError(
                    f"sink {self.table.path}: batch {plan.batch_id} has rows of "
                    f"{f.topic_partition}, which the batch did not read. Every row must come "
                    "from a record of the same micro-batch (stateful operators that emit rows "
                    "of earlier batches, and other sources, are not supported)"
                )
            if f.min_offset < planned.from_offset or f.max_offset >= planned.until_offset:
                raise SinkError(
                    f"sink {self.table.path}: batch {plan.batch_id} has rows of "
                    f"{f.topic_partition} at offsets {f.min_offset}..{f.max_offset}, outside "
                    f"the batch's range [{planned.from_offset}, {planned.until_offset}). Every "
                    "row must keep the offset of the record it came from, read in the same "
                    "micro-batch"
                )
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise SinkError(f"sink {self.table.path}: batch {plan.batch_id} lists a file twice")

    def _check_exist(self) -> None:
        """Every file must exist with the size its task reported (before any commit)."""
        if not self.files:
            return
        where = location(self.table.uri, self.table.storage_options)
        infos = where.fs.get_file_info([where.child(f.path) for f in self.files])
        problems = []
        for f, info in zip(self.files, infos, strict=True):
            if info.size is None or info.type.name != "File":
                problems.append(f"{f.path} is missing")
            elif info.size != f.size:
                problems.append(f"{f.path} has {info.size} bytes, its task wrote {f.size}")
        if problems:
            shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
            raise SinkError(
                f"sink {self.table.path}: {len(problems)} data file(s) of the batch are not as "
                f"written: {shown}. Nothing was committed"
            )
