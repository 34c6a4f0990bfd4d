"""Logging for code that runs in Spark's Python workers, where nobody configured logging."""

from __future__ import annotations

import logging
import os

#: Environment variable naming a file to log to instead of the worker's stderr.
LOG_FILE_ENV = "SPARK_GROUPS_LOG_FILE"
#: Environment variable with the ``spark_groups`` log level (default INFO).
LOG_LEVEL_ENV = "SPARK_GROUPS_LOG_LEVEL"


def log_to_stderr() -> None:
    """Send ``spark_groups`` records to the worker's stderr (Spark copies it into the driver
    log), or to ``$SPARK_GROUPS_LOG_FILE``, at ``$SPARK_GROUPS_LOG_LEVEL`` (default INFO).

    Does nothing when the application configured logging itself or it was done already.
    """
    root = logging.getLogger("spark_groups")
    if any(not isinstance(h, logging.NullHandler) for h in root.handlers):
        return
    if logging.getLogger().handlers:
        return
    path = os.environ.get(LOG_FILE_ENV)
    handler: logging.Handler = logging.FileHandler(path) if path else logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(os.environ.get(LOG_LEVEL_ENV, "INFO").upper())
