"""The spark-groups CLI against a real broker and a real ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.ledger import LedgerRow, OffsetLedger
from spark_groups.tools.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]


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
    # Three commits of partition 0 whose lag at commit time grew by 4 records a minute.
    now = datetime.now(UTC)
    OffsetLedger(ledger, group).append(
        [
            LedgerRow(topic, 0, 2 * b, 2 * b + 2, "m", 1, b, now - timedelta(minutes=3 - b), end)
            for b, end in ((0, 4), (1, 10), (2, 16))
        ]
    )
    result = CliRunner().invoke(
        main, ["describe", group, "-b", bootstrap_servers, "--offsets-table", ledger]
    )
    assert result.exit_code == 0, result.output
    lines = {
        line.split("│")[2].strip(): line for line in result.output.splitlines() if topic in line
    }
    cells = lambda p: [c.strip() for c in lines[p].split("│")[1:-1]]  # noqa: E731
    assert cells("0") == [topic, "0", "4", "6", "10", "4", "growing (+4/min)", "ledger ahead"]
    assert cells("1") == [topic, "1", "10", "-", "10", "0", "unknown", ""]


def test_describe_names_an_unreachable_cluster() -> None:
    result = CliRunner().invoke(main, ["describe", "g", "-b", "127.0.0.1:9", "--topic", "t"])
    assert result.exit_code != 0
    assert "127.0.0.1:9" in result.output


def test_demo_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_GROUPS_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 1
    assert str(tmp_path / "jobs" / "ingest.py") in result.output
    assert "Traceback" not in result.output

    monkeypatch.delenv("SPARK_GROUPS_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))  # no spark-submit there
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 1
    assert "spark-submit" in result.output


def test_jobs_demo_is_a_thin_wrapper_of_the_same_demo(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path), PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "jobs" / "demo.py")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "demo failed: the demo needs spark-submit on PATH" in done.stderr


def test_broker_runs_in_the_foreground_producing_orders_until_ctrl_c() -> None:
    from spark_groups.embedded import free_port

    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-c", "from spark_groups.tools.cli import main; main()", "broker"),
            *("--port", str(port), "--topic", "walk", "--partitions", "2", "--rate", "50"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    consumer = None
    try:
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([KafkaTopicPartition("walk", p, 0) for p in (0, 1)])
        orders: list[dict] = []
        deadline = time.monotonic() + 60
        while len(orders) < 60:
            assert time.monotonic() < deadline, f"only {len(orders)} orders arrived"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                orders.append(json.loads(message.value()))
        assert {"order_id", "customer", "amount"} <= set(orders[0])
    finally:
        if consumer is not None:
            consumer.close()
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert f"broker on 127.0.0.1:{port}" in output
    assert "stopped after producing" in output


def test_version_names_every_library_a_support_case_needs() -> None:
    """``spark-groups --version``: the package (one version, kept in spark_groups/__init__.py
    and read by the build) and what it runs with."""
    from importlib import metadata

    import confluent_kafka

    import spark_groups

    done = subprocess.run(
        [sys.executable, "-c", "from spark_groups.tools.cli import main; main()", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert rows["spark-groups"] == spark_groups.__version__ == metadata.version("spark-groups")
    assert rows["librdkafka"] == confluent_kafka.libversion()[0]
    assert rows["deltalake"] == metadata.version("deltalake")
    assert rows["pyspark"] == metadata.version("pyspark")
    assert {"confluent-kafka", "python", "read", "pyarrow"} <= set(rows)
