"""Tables on a real S3-compatible server (S3Proxy on loopback, docs/storage.md)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from s3_support import put_object

from spark_groups.group.history import history_path, read_history
from spark_groups.ledger.table import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.tools.s3_server import S3Server

from broker_support import produce_ids
from helpers import group_options, unique

pytestmark = pytest.mark.timeout(300)


def _race_one_version(uri: str, options: dict[str, str]) -> tuple[int, list[str]]:
    """Two writers that both saw the table at the same version commit the next version at
    the same moment, without retries: the version they raced for and each one's outcome."""
    tables = [DeltaTable(uri, storage_options=options) for _ in range(2)]
    seen = tables[0].version()
    assert tables[1].version() == seen
    start = threading.Barrier(2)
    outcome = ["", ""]

    def commit(i: int) -> None:
        start.wait()
        try:
            write_deltalake(
                tables[i],
                pa.table({"writer": [i]}),
                mode="append",
                commit_properties=CommitProperties(max_commit_retries=0),
            )
            outcome[i] = "won"
        except Exception as exc:  # the loser's CommitFailedError
            outcome[i] = f"lost: {type(exc).__name__}"

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return seen + 1, outcome


def test_the_server_refuses_a_put_if_none_match_over_an_existing_object(
    s3_server: S3Server, s3_bucket: str
) -> None:
    bucket = s3_bucket.removeprefix("s3://")
    key = "_delta_log/00000000000000000001.json"
    assert put_object(s3_server, bucket, key, b"first", {"If-None-Match": "*"}) == 200
    assert put_object(s3_server, bucket, key, b"second", {"If-None-Match": "*"}) == 412
    assert put_object(s3_server, bucket, key, b"third", {"X-Amz-Meta-Note": "x"}) == 200
    with s3_server.filesystem().open_input_stream(f"{bucket}/{key}") as stream:
        assert stream.read() == b"third"  # only the unconditional PUT replaced it


def test_conditional_put_lets_exactly_one_of_two_commits_of_a_version_win(
    s3_server: S3Server, s3_bucket: str
) -> None:
    options = s3_server.storage_options()  # aws_conditional_put=etag
    uri = f"{s3_bucket}/race"
    write_deltalake(uri, pa.table({"writer": [-1]}), storage_options=options)
    for _ in range(5):
        version, outcome = _race_one_version(uri, options)
        assert sorted(o.split(":")[0] for o in outcome) == ["lost", "won"], outcome
        table = DeltaTable(uri, storage_options=options)
        assert table.version() == version
        winner = outcome.index("won")
        # The log's entry for the raced version is the winner's: its one row is there, the
        # loser's is nowhere.
        rows = DeltaTable(uri, version=version, storage_options=options).to_pyarrow_table()
        later = rows.column("writer").to_pylist()
        before = DeltaTable(uri, version=version - 1, storage_options=options)
        earlier = before.to_pyarrow_table().column("writer").to_pylist()
        assert sorted(later) == sorted([*earlier, winner])


def _files_holding(root: Path, secrets: list[str]) -> list[str]:
    """Files under ``root`` whose bytes hold one of ``secrets`` (logs, JSON, Parquet pages)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if any(s.encode() in data for s in secrets):
            found.append(str(path))
    return found


def test_a_group_query_with_ledger_history_and_sink_on_s3_lands_every_record_once(
    spark, bootstrap_servers: str, make_topic, s3_server: S3Server, s3_bucket: str, tmp_path
) -> None:
    topic, group = make_topic(3), unique("s3")
    ledger, table = f"{s3_bucket}/_offsets/{group}", f"{s3_bucket}/tables/orders"
    storage = {f"storage.{k}": v for k, v in s3_server.storage_options().items()}
    checkpoint = tmp_path / "checkpoint"  # Spark's checkpoint on S3 needs S3A: a later step

    def run() -> None:
        df = (
            spark.readStream.format("kafka-group")
            .options(**group_options(bootstrap_servers, topic, group, ledger, **storage))
            .option("sink.table", table)
            .load()
            .selectExpr("cast(cast(value as string) as long) as id", "topic", "partition", "offset")
        )
        query = (
            df.writeStream.format("delta-group")
            .option("group.id", group)
            .option("checkpointLocation", str(checkpoint))
            .options(**storage)
            .trigger(availableNow=True)
            .start(table)
        )
        assert query.awaitTermination(240), "AvailableNow query did not end"
        assert query.exception() is None

    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[40, 90])
    run()
    more = produce_ids(bootstrap_servers, topic, range(300, 360), 3)
    run()  # resumes from the ledger on S3
    options = s3_server.storage_options()

    # The sink's table, read back from S3 with delta-rs: every id once.
    sink = DeltaTable(table, storage_options=options)
    ids = sink.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(360)), "a record is missing or written twice on S3"
    assert all(u.startswith(f"{s3_bucket}/tables/orders/") for u in sink.file_uris())
    ends = {TopicPartition(topic, p): counts[p] + more[p] for p in range(3)}
    assert committed_positions(table, group, list(ends), options) == ends

    # The ledger and the rebalance history, on S3 too.
    assert OffsetLedger(ledger, group, storage_options=options).latest_positions() == ends
    history = read_history(history_path(ledger), options)
    assert history.num_rows > 0
    assert set(history.column("group_id").to_pylist()) == {group}
    assert not (tmp_path / "_offsets").exists() and not Path("s3:").exists()

    # The credentials are nowhere in what the run wrote: the tables' objects (commit info
    # included), the ledger's and history's rows, Spark's checkpoint.
    secrets = [s3_server.secret_key, s3_server.access_key]
    assert _files_holding(s3_server.data_dir, secrets) == []
    assert _files_holding(checkpoint, secrets) == []


def test_a_query_whose_ledger_on_s3_has_no_safe_commit_fails_at_load_naming_the_option(
    spark, bootstrap_servers: str, make_topic, s3_server: S3Server, s3_bucket: str
) -> None:
    topic = make_topic(1)
    unsafe = s3_server.storage_options(conditional_put=False)
    opts = group_options(
        bootstrap_servers,
        topic,
        unique("s3"),
        f"{s3_bucket}/_offsets/x",
        **{f"storage.{k}": v for k, v in unsafe.items()},
    )
    with pytest.raises(Exception) as caught:
        spark.readStream.format("kafka-group").options(**opts).load()
    message = str(caught.value)
    assert "offsets.table" in message and "storage.aws_conditional_put=etag" in message
    assert s3_server.secret_key not in message
