"""librdkafka's own lines go through Python logging, folded, with secrets scrubbed."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spark_groups.kafka import logs
from spark_groups.kafka.logs import FoldedLog, LibrdkafkaLog

HERE = Path(__file__).resolve().parent
#: A line of spark_groups' worker logging (spark/worker_logging.py).
LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) spark_groups\S* "
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repeats_are_folded_then_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    monkeypatch.setattr(logs.time, "monotonic", clock)
    folded = FoldedLog(logging.getLogger("spark_groups.test.folded"), fold_s=5.0)
    caplog.set_level(logging.INFO, "spark_groups.test.folded")
    line = "127.0.0.1:1/bootstrap: Connect failed: Connection refused (after {}ms in state CONNECT)"
    for i in range(97):  # one every 50 ms for ~4.9 s: the first is logged, the rest counted
        folded.log(logging.ERROR, line.format(i))
        clock.now += 0.05
    folded.log(logging.ERROR, "another line")
    clock.now = 106.0
    folded.log(logging.ERROR, line.format(3))
    assert [r.getMessage() for r in caplog.records] == [
        line.format(0),
        "another line",
        line.format(3) + " (96 more times in the last 6.0 s)",
    ]


def test_levels_and_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logs.LOGGER_NAME)
    log = LibrdkafkaLog({"sasl.password": "hunter2-secret", "bootstrap.servers": "b:9092"})
    log.syslog(3, "FAIL", "auth failed for password hunter2-secret")
    log.syslog(7, "BROKER", "connecting")
    log.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#consumer-1", "timed out")
    got = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        (logging.ERROR, "FAIL auth failed for password ***"),
        (logging.DEBUG, "BROKER connecting"),
        (logging.WARNING, "REQTMOUT [rdkafka#consumer-1] timed out"),
    ]


def test_an_unreachable_broker_writes_only_folded_log_lines_to_stderr() -> None:
    """The driver's member and both read paths against 127.0.0.1:1: each gives up with its
    typed error; stderr holds spark_groups' formatted lines only (librdkafka's among them),
    a handful per client rather than one every 50 ms, and never the SASL password."""
    done = subprocess.run(
        [sys.executable, str(HERE / "unreachable_client.py"), "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.splitlines()[0] == "member: BrokerUnreachableError"
    assert all(line.endswith("BrokerUnreachableError") for line in done.stdout.splitlines())
    lines = done.stderr.splitlines()
    assert lines and all(LOG_LINE.match(line) for line in lines), [
        line for line in lines if not LOG_LINE.match(line)
    ][:5]
    from_librdkafka = [line for line in lines if f" {logs.LOGGER_NAME} " in line]
    # ~15 s against a dead broker: unfolded, librdkafka logs a line every ~50 ms (~300).
    assert 3 <= len(from_librdkafka) <= 15, from_librdkafka
    assert "hunter2" not in done.stderr
