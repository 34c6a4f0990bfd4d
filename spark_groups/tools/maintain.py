"""``spark-groups optimize`` and ``vacuum``: maintenance of a sink table beside running members.

The work itself is :mod:`spark_groups.sink.live_maintenance`. Both write to the table, so a
table on S3 must have safe commits (:func:`spark_groups.storage.check_commit_safety`) before
anything is done.
"""

from __future__ import annotations

import getpass
import re
import socket

from spark_groups.errors import OptionError
from spark_groups.sink.live_maintenance import OptimizeResult, VacuumResult, optimize, vacuum_table
from spark_groups.storage.object_stores import check_commit_safety

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_FACTOR = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def operator(command: str) -> str:
    """Who maintains: ``<command>:<user>@<host>`` (kept in the commit info; never a secret)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment
        user = "unknown"
    return f"{command}:{user}@{socket.gethostname()}"


def parse_size(text: str, option: str) -> int:
    """A size in bytes from ``134217728``, ``128MB``, ``128M`` or ``128MiB`` (binary units)."""
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise OptionError(option, f"expected a positive size such as 128MB, got {text!r}")
    return int(match.group(1)) * _FACTOR[(match.group(2) or "")[:1].lower()]


def run_optimize(
    table: str,
    storage_options: dict[str, str],
    target_size: str | None = None,
    take_over: bool = False,
) -> OptimizeResult:
    """Compact the sink table ``table`` (``target_size`` as given on the command line)."""
    size = None if target_size is None else parse_size(target_size, "--target-size")
    check_commit_safety(table, storage_options, "TABLE", prefix="--storage ")
    return optimize(
        table, storage_options or None, operator("optimize"), target_size=size, take_over=take_over
    )


def run_vacuum(
    table: str,
    storage_options: dict[str, str],
    retain_hours: int | None = None,
    members_stopped: bool = False,
) -> VacuumResult:
    """Vacuum the sink table ``table``: files no longer referenced, older than
    ``retain_hours``."""
    check_commit_safety(table, storage_options, "TABLE", prefix="--storage ")
    return vacuum_table(
        table, storage_options or None, operator("vacuum"), retain_hours,
        members_stopped=members_stopped,
    )  # fmt: skip
