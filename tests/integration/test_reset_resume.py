"""A kafka-group query resumes where ``spark-groups reset`` put the group, even backwards."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.ledger import LedgerRow, OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.tools.cli import main
from spark_groups.tools.timeline import timeline

from support.broker import produce_ids, unique
from support.options import group_options

pytestmark = pytest.mark.integration


def test_query_resumes_from_a_backwards_reset(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, group = make_topic(2), unique("g")
    produce_ids(bootstrap_servers, topic, range(40), 2)  # ids 0,2,..38 on p0; 1,..39 on p1
    # The group has read everything: in Kafka and in the ledger.
    committer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group})
    try:
        committer.commit(
            offsets=[KafkaTopicPartition(topic, 0, 20), KafkaTopicPartition(topic, 1, 20)],
            asynchronous=False,
        )
    finally:
        committer.close()
    ledger_path = str(tmp_path / "ledger")
    now = datetime.now(UTC)
    OffsetLedger(ledger_path, group).append(
        [LedgerRow(topic, p, 0, 20, "old-member", 1, 0, now) for p in (0, 1)]
    )

    reset = CliRunner().invoke(
        main,
        ["reset", group, "-b", bootstrap_servers, "--offsets-table", ledger_path,
         "--to", f'offsets-json:{{"{topic}": {{"0": 15}}}}'],
    )  # fmt: skip
    assert reset.exit_code == 0, reset.output

    table = unique("q")
    df = (
        spark.readStream.format("kafka-group")
        .options(**group_options(bootstrap_servers, topic, group, ledger_path))
        .load()
    )
    query = (
        df.selectExpr("cast(value as string) as id", "partition", "offset")
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .format("memory")
        .queryName(table)
        .start()
    )
    assert query.awaitTermination(180), "AvailableNow query did not end"
    assert query.exception() is None
    rows = sorted((r.partition, r.offset, int(r.id)) for r in spark.table(table).collect())
    assert rows == [(0, offset, 2 * offset) for offset in range(15, 20)]

    positions = OffsetLedger(ledger_path, group).latest_positions()
    assert positions == {TopicPartition(topic, 0): 20, TopicPartition(topic, 1): 20}
    p0 = TopicPartition(topic, 0)
    kinds = [(e.kind, e.offsets) for e in timeline(ledger_path, group) if e.partition == p0]
    assert [k for k, _ in kinds if k != "assigned"] == ["batch", "reset", "batch"]
    assert ("reset", (20, 15)) in kinds
    assert ("batch", (15, 20)) in kinds
