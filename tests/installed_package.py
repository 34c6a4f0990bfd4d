"""The lanes' check that tests run the installed package, not this checkout.

``.ci/run``'s compatibility lanes install the release wheel into a clean venv and set
``SPARK_GROUPS_TEST_INSTALLED=1``; ``tests/conftest.py`` then refuses to start unless
:func:`problems` is empty: ``spark_groups`` imports from the venv (in this process and in a
child started from the repository root, as members and Spark's workers are), and the wheel's
native read path loads.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: Set by the lanes of ``.ci/run``: the tests must run an installed spark_groups.
INSTALLED_ENV = "SPARK_GROUPS_TEST_INSTALLED"
REPO_ROOT = Path(__file__).resolve().parents[1]
# A child's spark_groups: prints where it is, exits 1 when that is a checkout.
_CHILD = (
    "import spark_groups; from spark_groups.tools.checkout import package_checkout; "
    "print(spark_groups.__file__); raise SystemExit(package_checkout() is not None)"
)


def problems() -> list[str]:
    """Why these tests would not run the installed package (empty when they would)."""
    import spark_groups
    from spark_groups.read import native
    from spark_groups.tools.checkout import package_checkout

    found = []
    if package_checkout() is not None:
        found.append(f"spark_groups imports from this checkout: {spark_groups.__file__}")
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    if child.returncode:
        found.append(
            "a process started from the repository root imports spark_groups from "
            f"{child.stdout.strip() or child.stderr.strip()} (set PYTHONSAFEPATH=1)"
        )
    if not native.available():
        found.append(f"the wheel's native read path does not load: {native.load_error()}")
    return found
