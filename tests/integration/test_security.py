"""A real query with secret-bearing settings writes the secret nowhere (issue 7).

Here the secret goes in ``kafka.sasl.password`` and ``kafka.ssl.key.password`` while
``security.protocol`` stays PLAINTEXT: librdkafka accepts both settings and ignores them, so
the query runs normally. ``test_sasl_acl.py`` runs the same check (:func:`run_and_search`)
with a password a SASL listener really checks. Afterwards every file the run wrote
(checkpoint, ledger, rebalance history, sink table with its _delta_log, the spark_groups log
at DEBUG, Spark's INFO log, the process's stdout/stderr, the CLI's output) is searched for
the secret.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from spark_groups.tools.cli import main as cli

from support.broker import create_topic, produce_ids, unique
from support.members import Member
from support.options import group_options
from support.tables import table_ids

SECRET = f"s3cret-{uuid.uuid4().hex[:12]}"
SECRET_OPTIONS = {
    "kafka.security.protocol": "PLAINTEXT",
    "kafka.sasl.password": SECRET,
    "kafka.ssl.key.password": SECRET,
}

#: Spark's own log, everything at INFO, into a file of the run.
LOG4J = """\
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p %c: %m%n
"""


def files_holding(root: Path, secret: str) -> list[str]:
    """Files under ``root`` whose bytes, or (for Parquet) whose decoded values, hold ``secret``."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hit = secret.encode() in data
        if not hit and path.suffix == ".parquet":
            hit = secret in json.dumps(pq.read_table(path).to_pylist(), default=str)
        if hit:
            found.append(str(path.relative_to(root)))
    return found


def run_and_search(
    tmp_path: Path,
    *,
    producer_servers: str,
    member_servers: str,
    source_options: dict[str, str],
    cli_settings: list[str],
    secret: str,
    grant: Callable[[str, str], None] | None = None,
) -> None:
    """Run a query (a sink_member.py process) with ``source_options`` into the delta-group
    sink, then ``spark-groups describe`` with ``-X cli_settings``; assert it read every
    record and that no file the run wrote holds ``secret``. Records are produced through
    ``producer_servers``; the member and the CLI talk to ``member_servers``, after
    ``grant(topic, group)`` (e.g. ACLs) if given."""
    topic = create_topic(producer_servers, 2, "sec")
    group = unique("sec")
    if grant is not None:
        grant(topic, group)
    produce_ids(producer_servers, topic, range(60), 2)
    run = tmp_path / "run"
    logs = run / "logs"
    logs.mkdir(parents=True)
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(LOG4J.format(log=logs / "spark.log"))
    spec = {
        "servers": member_servers,
        "topic": topic,
        "group": group,
        "table": str(run / "table"),
        "ledger": str(run / "ledger"),
        "checkpoint": str(run / "checkpoint"),
        "trigger": "availableNow",
        "spark_log_level": "INFO",
        "source_options": source_options,
        "log4j_config": str(log4j),
    }
    # The spec (with the secret) is the process's argument, not something it writes.
    member = Member("sec-1", spec, logs)
    log_env = {"SPARK_GROUPS_LOG_FILE": str(logs / "spark_groups.log")}
    code = member.run(300, {**log_env, "SPARK_GROUPS_LOG_LEVEL": "DEBUG"})
    assert code == 0, member.log_text()[-3000:]
    assert sorted(table_ids(run / "table")) == list(range(60))

    x_args = [arg for setting in cli_settings for arg in ("-X", setting)]
    cli_run = CliRunner().invoke(
        cli,
        ["describe", group, "-b", member_servers, "--offsets-table", str(run / "ledger"),
         "--topic", topic, *x_args],
    )  # fmt: skip
    assert cli_run.exit_code == 0, cli_run.output
    (logs / "cli").write_text(cli_run.output)

    # The search covers what matters: every store the run wrote, and logs with content.
    written = {p.relative_to(run).parts[0] for p in run.rglob("*") if p.is_file()}
    assert {"checkpoint", "ledger", "table", "logs"} <= written
    assert any(p.name.startswith("ledger") and p.name != "ledger" for p in run.iterdir()), (
        "no rebalance history table next to the ledger"
    )
    assert (run / "checkpoint" / "offsets" / "0").exists()
    assert "DEBUG" in (logs / "spark_groups.log").read_text()
    assert "INFO org.apache.spark" in (logs / "spark.log").read_text()  # Spark's own log
    assert files_holding(run, secret) == []


def test_a_query_run_writes_the_secret_nowhere(bootstrap_servers: str, tmp_path: Path) -> None:
    """PLAINTEXT with secret settings librdkafka ignores; the real SASL case (a password the
    broker checks) is ``test_sasl_acl.py::test_a_sasl_run_writes_the_password_nowhere``."""
    run_and_search(
        tmp_path,
        producer_servers=bootstrap_servers,
        member_servers=bootstrap_servers,
        source_options=dict(SECRET_OPTIONS),
        cli_settings=["security.protocol=PLAINTEXT", f"sasl.password={SECRET}"],
        secret=SECRET,
    )


@pytest.mark.parametrize(
    ("bad", "option"),
    [
        ({"kafka.session.timeout.ms": "soon"}, "kafka.session.timeout.ms"),
        ({"maxOffsetsPerTrigger": "-1"}, "maxOffsetsPerTrigger"),
        ({"startingOffsets": '{"t": {"0": }'}, "startingOffsets"),
    ],
)
def test_a_failing_query_never_shows_the_secret(
    spark: Any, bootstrap_servers: str, make_topic, bad: dict, option: str
) -> None:
    opts = group_options(bootstrap_servers, make_topic(1), unique("sec"), None)
    opts.update(SECRET_OPTIONS, **bad)
    query = None
    try:
        df = spark.readStream.format("kafka-group").options(**opts).load()
        query = df.writeStream.format("noop").start()
        query.awaitTermination(120)
        error: BaseException | None = query.exception()
    except Exception as exc:  # Spark wraps the source's error
        error = exc
    finally:
        if query is not None:
            query.stop()
    assert error is not None, "the query did not fail"
    text = str(error)
    assert option in text
    assert SECRET not in text
