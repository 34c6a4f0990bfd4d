"""Where a Spark Declarative Pipelines flow keeps its checkpoint, and which refresh it is on.

Spark Declarative Pipelines (``spark-pipelines``, Spark 4.1+) chooses each streaming flow's
checkpoint itself, below the spec's ``storage`` root::

    <storage>/_checkpoints/<target>/<flow>/<n>

``<target>`` is the flow's destination as path parts (a table: ``<catalog>/<database>/<table>``;
a sink: its name), ``<flow>`` the flow's name, and ``<n>`` counts full refreshes: the flow
runs in the highest numbered directory there (``0`` when there is none), and a full refresh of
its target creates the next one (``SystemMetadata.getLatestCheckpointDir`` in Spark). A Python
source is not told that path, so the ``kafka-group`` source takes the flow's directory (the
option ``pipelines.flowCheckpoints``, :func:`spark_groups.pipelines.flow_checkpoints` makes
it) and finds the checkpoint there by the same rule when its query starts
(:func:`current`): on Spark 4.0 and 4.1 it is the source's ``checkpointLocation``, and
``<n>`` > 0 tells the source that its flow was refreshed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow.fs as pafs

from spark_groups.storage.files import location

#: The source option naming a pipeline flow's checkpoints directory.
FLOW_CHECKPOINTS_OPTION = "pipelines.flowCheckpoints"


@dataclass(frozen=True)
class FlowCheckpoint:
    """The checkpoint a pipeline flow runs in: its ``path`` and its ``refresh`` number (how
    many full refreshes the flow's target has had; 0: none)."""

    path: str
    refresh: int


def current(root: str, storage_options: Mapping[str, str] | None = None) -> FlowCheckpoint:
    """The checkpoint the flow whose checkpoints directory is ``root`` runs in now: its
    highest numbered subdirectory, ``0`` when there is none (nothing is created)."""
    where = location(root, storage_options, option=FLOW_CHECKPOINTS_OPTION)
    infos = where.fs.get_file_info(pafs.FileSelector(where.path, allow_not_found=True))
    numbers = [
        int(info.base_name)
        for info in infos
        if info.type == pafs.FileType.Directory and info.base_name.isdigit()
    ]
    refresh = max(numbers, default=0)
    return FlowCheckpoint(f"{root.rstrip('/')}/{refresh}", refresh)
