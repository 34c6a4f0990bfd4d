"""The report writer: docs/benchmarks.md section by section, and the results files.

Every generated section of docs/benchmarks.md sits between ``<!-- NAME:start -->`` and
``<!-- NAME:end -->``; :func:`replace_section` rewrites one and leaves the rest of the page,
the hand-written notes among it, as it is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of section ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def with_markers(name: str, body: str) -> str:
    """``body`` between the markers of section ``name``."""
    start, end = markers(name)
    return f"{start}\n{body.strip(chr(10))}\n{end}"


def replace_section(name: str, body: str, page: Path = PAGE) -> None:
    """Put ``body`` between the markers of section ``name`` in ``page`` (appended when they
    are missing)."""
    start, end = markers(name)
    text = with_markers(name, body)
    old = page.read_text() if page.exists() else ""
    if start in old and end in old:
        before, rest = old.split(start, 1)
        page.write_text(before + text + rest.split(end, 1)[1])
    else:
        page.write_text(old.rstrip("\n") + "\n\n" + text + "\n")


def save(results: dict[str, Any], path: Path) -> None:
    """Write ``results`` as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")


def load(path: Path) -> dict[str, Any]:
    """Results saved by :func:`save`."""
    return json.loads(path.read_text())


# --- how the sections write numbers ---


def rate(x: float | None) -> str:
    """Records per second: ``1,234,567`` (``n/a`` for none)."""
    return "n/a" if x is None or not math.isfinite(x) or not x else f"{x:,.0f}"


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``1.23x`` (``n/a`` when either is missing)."""
    if not a or not b or not math.isfinite(a) or not math.isfinite(b):
        return "n/a"
    return f"{a / b:.2f}x"


def met(ok: bool) -> str:
    """A target: ``met`` or ``**not met**``."""
    return "met" if ok else "**not met**"
