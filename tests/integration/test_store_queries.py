"""A group query whose ledger, rebalance history and sink table are on an object store, as real
servers (S3Proxy, Azurite on loopback; docs/storage.md): every record once, resumed from the
ledger there, and no credential in anything the run wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_groups.group.history import history_path, read_history
from spark_groups.ledger.offset_ledger import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions

from support.broker import produce_ids, unique
from support.options import group_options
from support.spark import run_into_sink
from support.tables import files_holding

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["s3", "azure"])
def store(request: pytest.FixtureRequest) -> tuple[str, dict[str, str], Path, list[str]]:
    """A fresh bucket or container: its URI, delta-rs' options, the server's folder and the
    credentials that must appear nowhere."""
    if request.param == "s3":
        s3: Any = request.getfixturevalue("s3_server")
        return request.getfixturevalue("s3_bucket"), s3.storage_options(), s3.data_dir, [
            s3.secret_key, s3.access_key,
        ]  # fmt: skip
    azure: Any = request.getfixturevalue("azure_server")
    options = azure.storage_options()
    return request.getfixturevalue("azure_container"), options, azure.data_dir, [
        options["azure_storage_account_key"]
    ]  # fmt: skip


def test_a_group_query_with_ledger_history_and_sink_on_the_store_lands_every_record_once(
    spark, bootstrap_servers: str, make_topic, store: tuple, tmp_path: Path
) -> None:
    root, options, data_dir, secrets = store
    topic, group = make_topic(3), unique("store")
    ledger, table = f"{root}/_offsets/{group}", f"{root}/tables/orders"
    storage = {f"storage.{k}": v for k, v in options.items()}
    checkpoint = tmp_path / "checkpoint"  # Spark's checkpoint on S3 needs S3A: test_s3_storage

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
    run()  # resumes from the ledger on the store

    # The sink's table, read back with delta-rs: every id once, every file on the store.
    sink = DeltaTable(table, storage_options=options)
    ids = sink.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(360)), "a record is missing or written twice"
    assert all(u.startswith(f"{table}/") for u in sink.file_uris()), sink.file_uris()[:3]
    ends = {TopicPartition(topic, p): counts[p] + more[p] for p in range(3)}
    assert committed_positions(table, group, list(ends), options) == ends
    # The ledger and the rebalance history, on the store too (nothing on the local disk).
    assert OffsetLedger(ledger, group, storage_options=options).latest_positions() == ends
    history = read_history(history_path(ledger), options)
    assert history.num_rows > 0 and set(history.column("group_id").to_pylist()) == {group}
    scheme = root.split("://")[0]
    assert not (tmp_path / "_offsets").exists() and not Path(f"{scheme}:").exists()
    # The credentials are nowhere in what the run wrote: the tables' objects (commit info
    # included), the ledger's and history's rows, Spark's checkpoint.
    assert files_holding(data_dir, secrets) == []
    assert files_holding(checkpoint, secrets) == []
