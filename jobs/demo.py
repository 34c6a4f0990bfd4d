"""The end-to-end demo (README command one runs this through jobs/demo.sh).

    python jobs/demo.py

A thin wrapper: the demo lives in :mod:`spark_groups.tools.demo` (also ``spark-groups demo``).
"""

from __future__ import annotations

import sys

from spark_groups.errors import SparkGroupsError
from spark_groups.tools.demo import run_demo

if __name__ == "__main__":
    try:
        run_demo()
    except SparkGroupsError as exc:
        sys.exit(f"demo failed: {exc}")
