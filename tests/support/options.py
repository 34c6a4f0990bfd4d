"""The settings of the tests' group members: kafka-group source options and plain consumers'
librdkafka settings, with a fast session."""

from __future__ import annotations

#: Group settings that make joins fast on the embedded broker (it waits ~half the session
#: timeout before completing a join) and a lost member's partitions move soon on any broker.
#: KIP-848 (group.protocol=consumer) takes both from the broker, which the tests' Kafka sets
#: alike (spark_groups.tools.kafka_broker).
FAST_GROUP = {"kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}

#: The ways a group assigns partitions that the tests run through: the classic protocol's
#: client-side assignors, eager and cooperative, and KIP-848's broker-side assignment.
ASSIGNMENTS = ("range", "cooperative-sticky", "consumer")


def assignment_options(assignment: str) -> dict[str, str]:
    """Source options for one of :data:`ASSIGNMENTS`."""
    if assignment == "consumer":
        return {"group.protocol": "consumer"}
    return {"partition.assignment.strategy": assignment}


def plain_consumer_config(servers: str, group: str, assignment: str) -> dict[str, str]:
    """A plain confluent-kafka member of the same group, speaking the same protocol."""
    config = {"bootstrap.servers": servers, "group.id": group}
    if assignment == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {
                "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "500",
                "partition.assignment.strategy": assignment,
            }
        )
    return config


def group_options(servers: str, topic: str, group: str, ledger: str | None, **extra: str) -> dict:
    """Options for a kafka-group source on ``topic`` reading from earliest."""
    opts = {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "group.id": group,
        "startingOffsets": "earliest",
    }
    if extra.get("group.protocol") != "consumer":
        opts.update(FAST_GROUP)
    if ledger:
        opts["offsets.table"] = ledger
    opts.update(extra)
    return opts
