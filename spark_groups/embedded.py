"""The embedded broker's public import path; it lives in :mod:`spark_groups.tools.embedded`."""

from spark_groups.tools.embedded import EmbeddedBroker, free_port

__all__ = ["EmbeddedBroker", "free_port"]
