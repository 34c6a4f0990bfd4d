"""Replay notices: what the source read of a batch Spark replayed, for the sink to plan from.

A replayed batch may read less than its offset-log entry says (``spark_groups.group.replay``).
The source writes that down before the batch's tasks run, one file per batch and group
(:func:`notice_path`: ``{"logged": ..., "read": ...}``); the sink plans from ``read`` when
``logged`` equals the batch's offset-log entry, so its table never claims offsets it did not
get. A notice of an earlier run is overwritten before any task of the next reads; one whose
``logged`` differs is ignored. Written with pyarrow, atomically by a rename on local disk.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spark_groups.offsets import BatchOffset
from spark_groups.storage.checkpoint import CHECKPOINT_OPTION
from spark_groups.storage.files import local_path, location


@dataclass(frozen=True)
class ReplayNotice:
    """A replayed batch as logged (``logged``) and as the source read it (``read``)."""

    logged: BatchOffset
    read: BatchOffset

    def to_json(self) -> str:
        """The file's text."""
        return json.dumps({"logged": self.logged.to_json(), "read": self.read.to_json()})

    @classmethod
    def from_json(cls, text: str) -> ReplayNotice:
        """Parse a notice file's text (raises on any other shape)."""
        value = json.loads(text)
        return cls(BatchOffset.from_json(value["logged"]), BatchOffset.from_json(value["read"]))


def notice_path(checkpoint: str, group_id: str, batch: int) -> str:
    """Where the notice of source batch ``batch`` of ``group_id`` lives in ``checkpoint``."""
    token = base64.urlsafe_b64encode(group_id.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{checkpoint.rstrip('/')}/spark_groups/replays/{batch}-{token}.json"


def write_notice(
    checkpoint: str,
    group_id: str,
    notice: ReplayNotice,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Write ``notice`` for its batch (replacing a notice of an earlier run)."""
    where = notice_path(checkpoint, group_id, notice.logged.batch)
    text = notice.to_json().encode("utf-8")
    local = local_path(where)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(local, text)
        return
    loc = location(where, storage_options, option=CHECKPOINT_OPTION)
    with loc.fs.open_output_stream(loc.path) as out:  # one PUT on an object store
        out.write(text)


def read_notice(
    checkpoint: str,
    group_id: str,
    logged: BatchOffset,
    storage_options: Mapping[str, str] | None = None,
) -> BatchOffset | None:
    """What the source read of ``logged``, when it wrote a notice for exactly that entry;
    None otherwise (no replay, or a replay that read the batch as logged)."""
    loc = location(
        notice_path(checkpoint, group_id, logged.batch), storage_options, option=CHECKPOINT_OPTION
    )
    if not loc.exists(loc.path):  # the common case: one metadata request
        return None
    notice = ReplayNotice.from_json(loc.read_text(loc.path))
    return notice.read if notice.logged == logged else None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
