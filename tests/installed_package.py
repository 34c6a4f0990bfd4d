"""The lanes' check that tests run the installed package, not this checkout.

``.ci/run``'s compatibility lanes install the release wheel into a clean venv and set
``SPARK_GROUPS_TEST_INSTALLED=1``; ``tests/conftest.py`` then refuses to start unless
:func:`problems` is empty: ``spark_groups`` imports from the venv (in this process and in a
child started from the repository root, as members and Spark's workers are), and the wheel's
native read path loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Set by the lanes of ``.ci/run``: the tests must run an installed spark_groups.
INSTALLED_ENV = "SPARK_GROUPS_TEST_INSTALLED"
REPO_ROOT = Path(__file__).resolve().parents[1]


def _in_checkout(path: str) -> bool:
    return Path(path).resolve().is_relative_to(REPO_ROOT / "spark_groups")


def problems() -> list[str]:
    """Why these tests would not run the installed package (empty when they would)."""
    import spark_groups
    from spark_groups.read import native

    found = []
    if _in_checkout(spark_groups.__file__):
        found.append(f"spark_groups imports from this checkout: {spark_groups.__file__}")
    child = subprocess.run(
        [sys.executable, "-c", "import spark_groups; print(spark_groups.__file__)"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
    )
    if child.returncode or _in_checkout(child.stdout.strip()):
        found.append(
            "a process started from the repository root imports spark_groups from "
            f"{child.stdout.strip() or child.stderr.strip()} (set PYTHONSAFEPATH=1)"
        )
    if not native.available():
        found.append(f"the wheel's native read path does not load: {native.load_error()}")
    return found
