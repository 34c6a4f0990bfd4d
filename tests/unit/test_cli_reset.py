"""spark-groups reset against the embedded broker and a real ledger."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from spark_groups.errors import OptionError
from spark_groups.ledger import RESET_BATCH, LedgerRow, OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.tools.cli import EXIT_BAD_OPTION, EXIT_GROUP_ACTIVE, main
from spark_groups.tools.reset import ResetTarget, parse_target

GROUP_SETTINGS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def kafka_offsets(servers: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": servers})
    request = ConsumerGroupTopicPartitions(group)
    found = admin.list_consumer_group_offsets([request])[group].result(15)
    return {p.partition: p.offset for p in found.topic_partitions if p.offset >= 0}


def group_state(servers: str, group: str) -> str:
    admin = AdminClient({"bootstrap.servers": servers})
    return admin.describe_consumer_groups([group])[group].result(15).state.name


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def member(servers: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **GROUP_SETTINGS,
        }
    )


def first_message(consumer: Consumer, topic: str, timeout_s: float = 60) -> tuple[int, int]:
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            return message.partition(), message.offset()
    raise AssertionError("no message within the deadline")


def test_reset_refuses_an_active_group_then_moves_kafka_and_the_ledger_backwards(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(20):
        producer.produce(topic, value=str(i).encode(), partition=i % 2)
    assert producer.flush(10) == 0
    ledger_path = str(tmp_path / "ledger")
    ledger = OffsetLedger(ledger_path, group)
    now = datetime.now(UTC)
    ledger.append(
        [
            LedgerRow(topic, 0, 0, 8, "m-1", 1, 0, now),
            LedgerRow(topic, 1, 0, 10, "m-1", 1, 0, now),
        ]
    )
    runner = CliRunner()
    base = ["reset", group, "-b", bootstrap_servers, "--topic", topic]
    base += ["--offsets-table", ledger_path]
    to_three = ["--to", "offsets-json:" + json.dumps({topic: {"0": 3}})]

    active = member(bootstrap_servers, group)
    try:
        first_message(active, topic)  # joined: the group is active
        active.commit(
            offsets=[KafkaTopicPartition(topic, 0, 8), KafkaTopicPartition(topic, 1, 10)],
            asynchronous=False,
        )
        refused = runner.invoke(main, [*base, *to_three])
        assert refused.exit_code == EXIT_GROUP_ACTIVE, refused.output
        assert "stop every member" in refused.output
        assert "Traceback" not in refused.output
    finally:
        active.close()
    assert kafka_offsets(bootstrap_servers, group) == {0: 8, 1: 10}
    assert ledger.latest_positions() == {TopicPartition(topic, 0): 8, TopicPartition(topic, 1): 10}
    wait_for(lambda: group_state(bootstrap_servers, group) == "EMPTY", "an empty group")

    dry = runner.invoke(main, [*base, *to_three, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    plan = [line for line in dry.output.splitlines() if topic in line]
    assert [c.strip() for c in plan[0].split("│")[1:-1]] == [topic, "0", "8", "3", "-5"]
    assert len(plan) == 1  # only the partition named in the JSON
    assert "nothing changed" in dry.output
    assert kafka_offsets(bootstrap_servers, group) == {0: 8, 1: 10}
    assert ledger.history().num_rows == 2

    done = runner.invoke(main, [*base, *to_three])
    assert done.exit_code == 0, done.output
    assert kafka_offsets(bootstrap_servers, group) == {0: 3, 1: 10}
    assert ledger.latest_positions() == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 10}
    [marker] = [r for r in ledger.history().to_pylist() if r["batch"] == RESET_BATCH]
    assert (marker["from_offset"], marker["until_offset"]) == (8, 3)
    assert marker["member_id"].startswith("reset:")

    # A plain consumer of the group resumes where the reset put it.
    plain = member(bootstrap_servers, group)
    try:
        assert first_message(plain, topic) == (0, 3)
    finally:
        plain.close()
    wait_for(lambda: group_state(bootstrap_servers, group) == "EMPTY", "an empty group")

    earliest = runner.invoke(main, [*base, "--to", "earliest"])
    assert earliest.exit_code == 0, earliest.output
    assert kafka_offsets(bootstrap_servers, group) == {0: 0, 1: 0}
    assert ledger.latest_positions() == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}
    latest = runner.invoke(main, [*base, "--to", "latest"])
    assert latest.exit_code == 0, latest.output
    assert kafka_offsets(bootstrap_servers, group) == {0: 10, 1: 10}
    assert ledger.latest_positions() == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}


def test_reset_rejects_bad_targets_and_offsets_outside_the_log(
    bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic, group = make_topic(1), f"g-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    base = ["reset", group, "-b", bootstrap_servers, "--topic", topic]
    assert parse_target('offsets-json {"t":{"1":2}}').offsets == {TopicPartition("t", 1): 2}
    for bad in ("yesterday", "timestamp:", "timestamp:not-a-time", "offsets-json:{oops"):
        result = runner.invoke(main, [*base, "--to", bad])
        assert result.exit_code == EXIT_BAD_OPTION, (bad, result.output)
        assert "--to" in result.output
    outside = runner.invoke(main, [*base, "--to", "offsets-json:" + json.dumps({topic: {"0": 5}})])
    assert outside.exit_code == EXIT_BAD_OPTION, outside.output
    assert "outside the log [0, 0]" in outside.output
    missing = runner.invoke(main, [*base, "--to", "offsets-json:" + json.dumps({topic: {"7": 0}})])
    assert missing.exit_code == EXIT_BAD_OPTION
    assert f"{topic}-7" in missing.output or f"{topic}/7" in missing.output
    no_topic = runner.invoke(main, ["reset", group, "-b", bootstrap_servers, "--to", "earliest"])
    assert no_topic.exit_code == EXIT_BAD_OPTION
    assert "--topic" in no_topic.output


def test_client_settings_are_passed_and_secrets_never_shown() -> None:
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["describe", "g", "-b", "127.0.0.1:9", "-X", "sasl.password=hunter2",
         "-X", "security.protocol=hunter2"],
    )  # fmt: skip
    assert result.exit_code == EXIT_BAD_OPTION, result.output
    assert "security.protocol" in result.output
    assert "hunter2" not in result.output
    malformed = runner.invoke(main, ["describe", "g", "-b", "127.0.0.1:9", "-X", "hunter2"])
    assert malformed.exit_code == EXIT_BAD_OPTION
    assert "key=value" in malformed.output
    assert "hunter2" not in malformed.output


def test_reset_targets_parse() -> None:
    assert parse_target("earliest") == ResetTarget("earliest")
    assert parse_target("LATEST") == ResetTarget("latest")
    ms = parse_target("timestamp:1793534400000")
    assert ms == ResetTarget("timestamp", timestamp_ms=1_793_534_400_000)
    assert parse_target("timestamp:2026-11-01T12:00:00Z") == ms
    assert parse_target("timestamp:2026-11-01T12:00:00") == ms  # naive = UTC
    assert parse_target("timestamp:2026-11-01T13:00:00+01:00") == ms
    assert parse_target('offsets-json:{"t": {"0": 5, "2": 0}}').offsets == {
        TopicPartition("t", 0): 5,
        TopicPartition("t", 2): 0,
    }
    for bad in ('offsets-json:{"t": {"0": -1}}', 'offsets-json:{"t": {"x": 1}}', "offsets-json:[]"):
        with pytest.raises(OptionError, match="offsets-json"):
            parse_target(bad)
