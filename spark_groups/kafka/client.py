"""Creating librdkafka clients, and the client types the rest of the library uses.

Other modules import ``Consumer``, ``KafkaError`` and friends from here, never from
``confluent_kafka`` itself, so this package stays the one place that talks to librdkafka.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark_groups.errors import SparkGroupsError
from spark_groups.kafka.classify import config_error
from spark_groups.kafka.config import bootstrap_servers_of
from spark_groups.kafka.logs import with_logger
from spark_groups.secrets import scrub

__all__ = [
    "AdminClient",
    "Consumer",
    "ConsumerGroupTopicPartitions",
    "KafkaError",
    "KafkaException",
    "KafkaTopicPartition",
    "Message",
    "NewTopic",
    "Producer",
    "create_consumer",
    "librdkafka_path",
    "librdkafka_version",
    "validate_config",
]


def create_consumer(config: Mapping[str, Any]) -> Consumer:
    """A ``Consumer`` for ``config``; a setting librdkafka rejects raises
    :class:`SparkGroupsError` naming the bootstrap servers, with secrets scrubbed."""
    try:
        return Consumer(with_logger(config))
    except KafkaException as exc:
        raise SparkGroupsError(
            f"cannot create a Kafka consumer for {bootstrap_servers_of(config)}: "
            f"{scrub(str(exc), config)}"
        ) from None


def validate_config(config: Mapping[str, Any]) -> None:
    """Let librdkafka check ``config`` now, without connecting anywhere (bootstrap servers
    are left out). Raises :class:`~spark_groups.errors.OptionError` naming the ``kafka.``
    key librdkafka rejected."""
    checked = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    try:
        Consumer(checked).close()
    except KafkaException as exc:
        raise config_error(exc) from None


def librdkafka_version() -> tuple[str, str]:
    """The versions of confluent-kafka and of the librdkafka it runs on."""
    import confluent_kafka

    client = confluent_kafka.version()
    return str(client[0] if isinstance(client, tuple) else client), confluent_kafka.libversion()[0]


def librdkafka_path() -> str | None:
    """The shared library of the librdkafka confluent-kafka runs on: the one its wheel ships
    (already loaded in this process), else a system one; None when none is found. The native
    read path (``spark_groups.read.native``) loads it, so both read paths run the same build."""
    import ctypes.util

    import confluent_kafka

    here = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    for pattern in ("confluent_kafka.libs/librdkafka*.so*", ".dylibs/librdkafka*.dylib"):
        found = sorted(glob.glob(os.path.join(here, os.pardir, pattern)))
        found += sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    return ctypes.util.find_library("rdkafka")
