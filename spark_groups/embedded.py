"""The embedded broker's public import path; it lives in :mod:`spark_groups.tools.tansu`."""

from spark_groups.tools.tansu import EmbeddedBroker, free_port

__all__ = ["EmbeddedBroker", "free_port"]
