"""Where a Spark Declarative Pipelines flow keeps its checkpoint, and which refresh it is on.

``spark-pipelines`` chooses each streaming flow's checkpoint itself,
``<storage>/_checkpoints/<target>/<flow>/<n>``: the flow runs in the highest numbered
directory (``0`` when there is none) and a full refresh of its target creates the next. A
Python source is not told that path, so the ``kafka-group`` source takes the flow's directory
(``pipelines.flowCheckpoints``, which :func:`flow_checkpoints` makes from the spec; public as
``spark_groups.flow_checkpoints``) and finds the checkpoint there by the same rule when its
query starts (:func:`current`); ``<n>`` > 0 tells it the flow was refreshed
(``spark_groups.group.refresh``). docs/pipelines.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from spark_groups.errors import OptionError
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


#: The names ``spark-pipelines`` looks for, in a directory and then in each of its parents.
SPEC_FILE_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml")
#: The catalog and database a spec that names none puts its tables in (the session's).
DEFAULT_CATALOG, DEFAULT_DATABASE = "spark_catalog", "default"


def find_spec(start: str | os.PathLike[str] | None = None) -> Path:
    """The pipeline spec ``spark-pipelines`` uses when run from ``start`` (default: the
    current directory, which is the spec's own while the CLI imports definitions files):
    the first directory from ``start`` up that holds one of :data:`SPEC_FILE_NAMES`."""
    here = Path(start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        found = [directory / name for name in SPEC_FILE_NAMES if (directory / name).is_file()]
        if len(found) > 1:
            raise OptionError(
                FLOW_CHECKPOINTS_OPTION,
                f"{directory} holds both {' and '.join(SPEC_FILE_NAMES)}: keep one",
            )
        if found:
            return found[0]
    raise OptionError(
        FLOW_CHECKPOINTS_OPTION,
        f"no {SPEC_FILE_NAMES[0]} in {here} or above it: call flow_checkpoints() from a "
        "definitions file that spark-pipelines runs, or pass spec=<the spec file>",
    )


def flow_checkpoints(
    target: str,
    flow: str | None = None,
    *,
    sink: bool = False,
    spec: str | os.PathLike[str] | None = None,
) -> str:
    """The checkpoints directory of the pipeline flow ``flow`` (default: ``target``'s own
    flow, named as the dataset) into ``target``, for the source option
    ``pipelines.flowCheckpoints``.

    ``target`` is a table (``name``, ``database.name`` or ``catalog.database.name``; the
    spec's ``catalog`` and ``database`` fill in what it leaves out) or, with ``sink=True``,
    a sink made by ``dp.create_sink``. The spec is the one ``spark-pipelines`` runs (found as
    it finds it, :func:`find_spec`) unless ``spec`` names it."""
    settings = _read_spec(Path(spec) if spec is not None else find_spec())
    storage = settings.get("storage")
    if not isinstance(storage, str) or not storage.strip():
        raise OptionError(FLOW_CHECKPOINTS_OPTION, "the pipeline spec names no storage root")
    parts = target.split(".")
    if any(not part or "`" in part for part in parts) or len(parts) > (1 if sink else 3):
        raise OptionError(
            FLOW_CHECKPOINTS_OPTION,
            f"{target!r} is not a {'sink name' if sink else 'table name'} this helper reads "
            "(plain names joined by dots, no backticks)",
        )
    if not sink:
        database = str(settings.get("database") or settings.get("schema") or DEFAULT_DATABASE)
        catalog = str(settings.get("catalog") or DEFAULT_CATALOG)
        parts = [catalog, database][: 3 - len(parts)] + parts
    return "/".join([storage.rstrip("/"), "_checkpoints", *parts, flow or parts[-1]])


def _read_spec(path: Path) -> Mapping[str, Any]:
    import yaml  # pyspark[pipelines] brings it, as spark-pipelines needs it

    with path.open(encoding="utf-8") as f:
        settings = yaml.safe_load(f)
    if not isinstance(settings, dict):
        raise OptionError(FLOW_CHECKPOINTS_OPTION, f"{path} is not a pipeline spec (no mapping)")
    return settings
