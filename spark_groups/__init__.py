"""spark_groups: a PySpark Structured Streaming source that is a real Kafka consumer-group member."""

from __future__ import annotations

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
