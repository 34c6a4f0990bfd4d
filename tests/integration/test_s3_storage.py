"""Tables on a real S3-compatible server (S3Proxy on loopback, docs/storage.md)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups.ledger.offset_ledger import OffsetLedger
from spark_groups.offsets import BatchOffset, TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.sink.plan import read_batch_plan
from spark_groups.storage import checkpoint
from spark_groups.storage.files import location
from spark_groups.tools.s3_server import S3Server

from support.broker import produce_ids, unique, wait_until
from support.options import group_options
from support.s3 import put_object
from support.tables import files_holding

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


def _committed_batches(s3_server: S3Server, checkpoint_uri: str) -> set[int]:
    """The Spark batch ids in the commit log of a checkpoint on the server (read directly)."""
    root = checkpoint_uri.removeprefix("s3a://")
    infos = s3_server.filesystem().get_file_info(
        pafs.FileSelector(f"{root}/commits", allow_not_found=True)
    )
    return {int(i.base_name) for i in infos if i.base_name.isdigit()}


def test_a_query_with_its_checkpoint_on_s3a_stops_resumes_from_it_and_lands_every_record_once(
    spark, bootstrap_servers: str, make_topic, s3_server: S3Server, s3a_bucket: str
) -> None:
    topic, group = make_topic(3), unique("s3a")
    bucket = f"s3://{s3a_bucket}"
    ledger, table = f"{bucket}/_offsets/{group}", f"{bucket}/tables/orders"
    chk = f"s3a://{s3a_bucket}/_checkpoints/{group}"  # Spark's own, through Hadoop's S3A
    options = s3_server.storage_options()
    storage = {f"storage.{k}": v for k, v in options.items()}
    tps = [TopicPartition(topic, p) for p in range(3)]

    def start(**trigger):
        df = (
            spark.readStream.format("kafka-group")
            .options(**group_options(bootstrap_servers, topic, group, ledger, **storage))
            .option("sink.table", table)
            # The source watches the same checkpoint's commit log (group/durable.py), on S3
            # with the same storage options; a checkpoint it could not read fails the query.
            .option("checkpointLocation", chk)
            .load()
            .selectExpr("cast(cast(value as string) as long) as id", "topic", "partition", "offset")
        )
        return (
            df.writeStream.format("delta-group")
            .option("group.id", group)
            .option("checkpointLocation", chk)
            .options(**storage)
            .trigger(**trigger)
            .start(table)
        )

    def landed(counts: dict[int, int]) -> bool:
        expected = {tp: counts[tp.partition] for tp in tps}
        return committed_positions(table, group, tps, options) == expected

    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[40, 90])
    first = start(processingTime="2 seconds")
    try:
        wait_until(lambda: landed(counts), 180, "the first run to write 300 records")
        more = produce_ids(bootstrap_servers, topic, range(300, 360), 3)
        counts = {p: counts[p] + more[p] for p in range(3)}
        wait_until(lambda: landed(counts), 120, "the first run to write 60 more")
    finally:
        first.stop()
    assert first.exception() is None
    before = _committed_batches(s3_server, chk)
    assert before, "the first run committed no batch to the checkpoint"

    more = produce_ids(bootstrap_servers, topic, range(360, 420), 3)
    counts = {p: counts[p] + more[p] for p in range(3)}
    second = start(availableNow=True)
    assert second.awaitTermination(240), "AvailableNow query did not end"
    assert second.exception() is None
    # Spark resumed from the checkpoint on s3a: the second run's batches go on from the
    # first run's (a fresh checkpoint would start at 0 again).
    after = _committed_batches(s3_server, chk)
    new = after - before
    assert new and min(new) == max(before) + 1, (sorted(before), sorted(after))

    # Every record exactly once in the table on S3; the table's and the ledger's positions
    # are the log ends.
    sink = DeltaTable(table, storage_options=options)
    ids = sink.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(420)), "a record is missing or written twice"
    ends = {tp: counts[tp.partition] for tp in tps}
    assert committed_positions(table, group, tps, options) == ends
    assert OffsetLedger(ledger, group, storage_options=options).latest_positions() == ends

    # spark_groups reads the checkpoint on s3a with pyarrow and the storage options: the
    # last batch's offset-log entry (the sink's plan) and commit-log entry (the source's
    # durability signal).
    last = max(after)
    log = location(checkpoint.offset_log_path(chk, last), options)
    found = [checkpoint.kafka_group_offset(x) for x in log.read_text(log.path).splitlines()]
    end = BatchOffset.from_json(next(v for v in found if v is not None))
    assert checkpoint.spark_batch_id(chk, end, options) == last
    assert checkpoint.is_committed(chk, last, options)
    assert sorted(read_batch_plan(chk, last, options).ranges.values()) == sorted(end.ranges)
    assert not Path("s3a:").exists()
    secrets = [s3_server.secret_key, s3_server.access_key]
    assert files_holding(s3_server.data_dir, secrets) == []


def test_a_checkpoint_on_s3a_that_python_cannot_reach_fails_the_query_naming_the_option(
    spark, bootstrap_servers: str, make_topic, s3_server: S3Server, s3a_bucket: str, tmp_path
) -> None:
    # Spark reaches the bucket (its S3A settings), but neither the sink nor the source gets
    # storage.* options, and the environment has no AWS credentials: the Python side cannot
    # read the checkpoint. The query fails at once, naming the option and what to set.
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(20), 1)

    def failure(sink_format: str, source_checkpoint: bool) -> str:
        group = unique("s3a")
        chk = f"s3a://{s3a_bucket}/_checkpoints/{group}"
        source = spark.readStream.format("kafka-group").options(
            **group_options(bootstrap_servers, topic, group, str(tmp_path / group / "ledger"))
        )
        if source_checkpoint:
            source = source.option("checkpointLocation", chk)
        writer = (
            source.load()
            .selectExpr("cast(cast(value as string) as long) as id", "topic", "partition", "offset")
            .writeStream.format(sink_format)
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
        )
        if sink_format == "delta-group":
            writer = writer.option("group.id", group)
        query = writer.start(str(tmp_path / group / "table"))
        with pytest.raises(Exception) as caught:
            query.awaitTermination(180)
            raise AssertionError("the query did not fail")
        assert not (tmp_path / group / "table").exists(), "a row landed"
        return str(caught.value)

    for message in (failure("delta-group", False), failure("noop", True)):
        assert "checkpointLocation" in message, message[-2000:]
        assert "storage.aws_access_key_id" in message and "fs.s3a" in message, message[-2000:]
        assert s3_server.secret_key not in message
