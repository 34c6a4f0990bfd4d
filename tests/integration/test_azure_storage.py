"""Tables on a real Azure Blob Storage server (Azurite on loopback, docs/storage.md): delta-rs'
commits race safely there, and a group query keeps its ledger, its rebalance history and its
sink's table on it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups.group.history import history_path, read_history
from spark_groups.ledger.offset_ledger import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions

from support.broker import produce_ids, unique
from support.options import group_options
from support.spark import run_into_sink

pytestmark = pytest.mark.timeout(300)


def test_two_commits_of_one_version_one_wins_the_other_is_refused(
    azure_server: Any, azure_container: str
) -> None:
    """delta-rs commits on Azure with a create-if-absent of the version's log file: of two
    writers that saw the same version, exactly one gets the next one."""
    uri, options = f"{azure_container}/race", azure_server.storage_options()
    write_deltalake(uri, pa.table({"writer": [-1]}), storage_options=options)
    for _ in range(3):
        tables = [DeltaTable(uri, storage_options=options) for _ in range(2)]
        seen = tables[0].version()
        start, outcome = threading.Barrier(2), ["", ""]

        def commit(
            i: int, tables: list = tables, outcome: list = outcome, start: Any = start
        ) -> None:
            start.wait()
            try:
                write_deltalake(
                    tables[i], pa.table({"writer": [i]}), mode="append",
                    commit_properties=CommitProperties(max_commit_retries=0),
                )  # fmt: skip
                outcome[i] = "won"
            except Exception as exc:
                outcome[i] = f"lost: {type(exc).__name__}"

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(outcome)[1] == "won" and sorted(outcome)[0].startswith("lost"), outcome
        assert DeltaTable(uri, storage_options=options).version() == seen + 1


def test_a_group_query_with_ledger_history_and_sink_on_azure_lands_every_record_once(
    spark, bootstrap_servers: str, make_topic, azure_server: Any, azure_container: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    topic, group = make_topic(3), unique("az")
    ledger, table = f"{azure_container}/_offsets/{group}", f"{azure_container}/tables/orders"
    options = azure_server.storage_options()
    storage = {f"storage.{k}": v for k, v in options.items()}
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        df = (
            spark.readStream.format("kafka-group")
            .options(**group_options(bootstrap_servers, topic, group, ledger, **storage))
            .option("sink.table", table)
            .load()
            .selectExpr("cast(cast(value as string) as long) as id", "topic", "partition", "offset")
        )
        assert run_into_sink(spark, df, table, checkpoint, group, 240, **storage) is None

    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[40, 90])
    run()
    more = produce_ids(bootstrap_servers, topic, range(300, 360), 3)
    run()  # resumes from the ledger on Azure

    sink = DeltaTable(table, storage_options=options)
    ids = sink.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(360)), "a record is missing or written twice on Azure"
    ends = {TopicPartition(topic, p): counts[p] + more[p] for p in range(3)}
    assert committed_positions(table, group, list(ends), options) == ends
    assert OffsetLedger(ledger, group, storage_options=options).latest_positions() == ends
    history = read_history(history_path(ledger), options)
    assert history.num_rows > 0 and set(history.column("group_id").to_pylist()) == {group}
    assert not (tmp_path / "_offsets").exists() and not Path("az:").exists()
    # The account key is nowhere in what the run wrote: the blobs, Spark's checkpoint.
    key = options["azure_storage_account_key"]
    for folder in (azure_server.data_dir, checkpoint):
        held = [p for p in folder.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
        assert held == [], held
