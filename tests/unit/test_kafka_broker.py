"""The test suite's Apache Kafka launcher (spark_groups.tools.kafka_broker)."""

from __future__ import annotations


def test_kafka_formats_storage_whatever_the_cluster_id_starts_with() -> None:
    """A random KRaft cluster id may start with '-' (URL-safe base64)."""
    from spark_groups.tools import kafka_broker

    broker = kafka_broker.KafkaBroker()
    broker._cluster_id = "-" + broker._cluster_id[1:]
    with broker:
        assert broker.bootstrap_servers
