"""The spark-groups CLI against a real broker and a real ledger."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.cli import main
from spark_groups.ledger import LedgerRow, OffsetLedger


def test_describe_shows_kafka_ledger_end_and_lag(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(20):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(10) == 0
    committer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group})
    try:
        committer.commit(
            offsets=[KafkaTopicPartition(topic, 0, 4), KafkaTopicPartition(topic, 1, 10)],
            asynchronous=False,
        )
    finally:
        committer.close()
    ledger = str(tmp_path / "ledger")
    OffsetLedger(ledger, group).append([LedgerRow(topic, 0, 0, 6, "m", 1, 0, datetime.now(UTC))])
    result = CliRunner().invoke(
        main, ["describe", group, "-b", bootstrap_servers, "--offsets-table", ledger]
    )
    assert result.exit_code == 0, result.output
    lines = {
        line.split("│")[2].strip(): line for line in result.output.splitlines() if topic in line
    }
    cells = lambda p: [c.strip() for c in lines[p].split("│")[1:-1]]  # noqa: E731
    assert cells("0") == [topic, "0", "4", "6", "10", "4", "ledger ahead"]
    assert cells("1") == [topic, "1", "10", "-", "10", "0", ""]


def test_describe_names_an_unreachable_cluster() -> None:
    result = CliRunner().invoke(main, ["describe", "g", "-b", "127.0.0.1:9", "--topic", "t"])
    assert result.exit_code != 0
    assert "127.0.0.1:9" in result.output
