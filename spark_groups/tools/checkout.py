"""Where the project's checkout is, for the tools that use its files.

The demo runs ``jobs/`` and ``conf/``; the test broker, S3Proxy, Spark's jars and the
delta-spark Python are fetched into ``.cache/`` by ``jars/``. The package runs from the
checkout when installed editable; an installed wheel (the lanes of ``.ci/run``) finds the
checkout in the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout to use instead of the one found (``jobs/``, ``conf/``, ``.cache/``).
HOME_ENV = "SPARK_GROUPS_HOME"
#: The folder of the fetched jar sets instead of ``.cache/jars`` of the checkout.
JARS_ENV = "SPARK_GROUPS_JARS"


def package_checkout() -> Path | None:
    """The checkout this package runs from (an editable install), None for an installed one."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "jars" / "fetch").is_file() else None


def checkout_root() -> Path:
    """``$SPARK_GROUPS_HOME``; else the checkout this package runs from (an editable install);
    else the working directory."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured)
    return package_checkout() or Path.cwd()


def jars_root() -> Path:
    """Where ``bash jars/fetch NAME`` put the jar sets: ``$SPARK_GROUPS_JARS``, else
    ``.cache/jars`` of :func:`checkout_root`."""
    configured = os.environ.get(JARS_ENV)
    return Path(configured) if configured else checkout_root() / ".cache" / "jars"
