"""A batch's data files on the driver, from its tasks to the commit that references them.

Until a commit references them the files a batch's tasks wrote are *staged*.
:class:`StagedFiles` checks them before anything is committed (rows inside their partition's
planned range, files in storage with the reported size), cuts them to the rows the commit
writes (rewritten once per batch, however often the commit is tried), and deletes every
staged file and rewrite the commit does not reference (all of them when nothing commits).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from spark_groups.errors import SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.sink_table import SinkTable
from spark_groups.sink.writer import DataFile, remove_files, rewrite_keeping, rewrite_without
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
        self._rewrites: dict[tuple[str, tuple], DataFile | None] = {}

    def __repr__(self) -> str:
        return f"StagedFiles({self.table.path!r}, {len(self.files)} file(s))"

    def check(self, plan: BatchPlan) -> None:
        """Refuse (:class:`~spark_groups.errors.SinkError`) files whose rows lie outside
        their partition's range in ``plan``, a file listed twice, and files missing from
        storage or not of the size their task reported."""
        self._check_against_plan(plan)
        self.check_exist()

    def cut(self, data_file: DataFile, starts: dict[TopicPartition, int]) -> DataFile | None:
        """``data_file`` with only the rows the commit writes: per Kafka partition in
        ``starts``, those from its offset there (the rows below it are in the table already);
        of other partitions none. The rewrite is made once per file and ``starts``."""
        key = (data_file.path, tuple(sorted(starts.items())))
        return self._rewritten(
            key, data_file, "the rows the commit leaves out",
            lambda: rewrite_keeping(self.table.uri, data_file, starts, self.compression,
                                    self.table.storage_options),
        )  # fmt: skip

    def without(self, data_file: DataFile, dropped: PartitionOffsets) -> DataFile | None:
        """``data_file`` without the rows at the offsets ``dropped`` names (a share batch's
        records the table holds already); rewritten once per file and ``dropped``."""
        key = (data_file.path, (json.dumps(dropped.to_json(), sort_keys=True),))
        return self._rewritten(
            key, data_file, "the records the table holds already",
            lambda: rewrite_without(self.table.uri, data_file, dropped, self.compression,
                                    self.table.storage_options),
        )  # fmt: skip

    def _rewritten(
        self,
        key: tuple[str, tuple],
        data_file: DataFile,
        left_out: str,
        rewrite: Callable[[], DataFile | None],
    ) -> DataFile | None:
        """The rewrite of ``data_file`` under ``key``, made by ``rewrite`` the first time."""
        if key not in self._rewrites:
            rewritten = self._rewrites[key] = rewrite()
            if rewritten is not None:
                self.made.add(rewritten.path)
            log.info(
                "sink %s: rewrote %s without %s (%d of %d kept)",
                self.table.path,
                data_file.path,
                left_out,
                0 if rewritten is None else rewritten.rows,
                data_file.rows,
            )
        return self._rewrites[key]

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
            for k in f.kafka:
                planned = plan.ranges.get(k.topic_partition)
                if planned is None:
                    raise SinkError(
                        f"sink {self.table.path}: batch {plan.batch_id} has rows of "
                        f"{k.topic_partition}, which the batch did not read. Every row must come "
                        "from a record of the same micro-batch (stateful operators that emit "
                        "rows of earlier batches, and other sources, are not supported)"
                    )
                if k.min_offset < planned.from_offset or k.max_offset >= planned.until_offset:
                    raise SinkError(
                        f"sink {self.table.path}: batch {plan.batch_id} has rows of "
                        f"{k.topic_partition} at offsets {k.min_offset}..{k.max_offset}, outside "
                        f"the batch's range [{planned.from_offset}, {planned.until_offset}). "
                        "Every row must keep the offset of the record it came from, read in the "
                        "same micro-batch"
                    )
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise SinkError(f"sink {self.table.path}: batch {plan.batch_id} lists a file twice")

    def check_exist(self) -> None:
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
