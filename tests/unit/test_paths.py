"""The paths Spark users write, as delta-rs and pyarrow take them (spark_groups.storage.paths,
spark_groups.storage.files): the mapping, the pyarrow file system of each store, and the typed
errors. No server: docs/storage.md says which stores were also tested on a real one."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from spark_groups.errors import OptionError, StoragePathError
from spark_groups.options import parse_options
from spark_groups.options.sink import parse_sink_options
from spark_groups.storage.files import check_location, local_path, location, table_uri
from spark_groups.storage.object_stores import azure_filesystem_args, check_commit_safety
from spark_groups.storage.paths import DBFS_MOUNT_ENV, is_databricks_fuse, resolve

SOURCE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "group.id": "etl"}
ABFSS = "abfss://lake@acct.dfs.core.windows.net/tables/orders"


@pytest.fixture
def dbfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder standing in for the DBFS FUSE mount (the documented setting)."""
    mount = tmp_path / "dbfs"
    mount.mkdir()
    monkeypatch.setenv(DBFS_MOUNT_ENV, str(mount))
    monkeypatch.delenv("MOUNT_ALLOW_UNSAFE_RENAME", raising=False)
    return mount


@pytest.fixture
def no_dbfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DBFS_MOUNT_ENV, str(tmp_path / "not-mounted"))


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("s3a://lake/tables/orders", "s3://lake/tables/orders"),
        ("s3n://lake/tables/orders", "s3://lake/tables/orders"),
        ("S3A://lake/t", "s3://lake/t"),
        ("s3://lake/t", "s3://lake/t"),
        (ABFSS, ABFSS),
        ("abfs://lake@acct.dfs.core.windows.net/t", "abfs://lake@acct.dfs.core.windows.net/t"),
        ("az://lake/t", "az://lake/t"),
        ("gs://lake/t", "gs://lake/t"),
        ("hdfs://namenode:8020/t", "hdfs://namenode:8020/t"),
        ("dbfs:/Volumes/main/etl/vol/t", "/Volumes/main/etl/vol/t"),
        ("dbfs:///Volumes/main/etl/vol/t", "/Volumes/main/etl/vol/t"),
        ("/Volumes/main/etl/vol/t", "/Volumes/main/etl/vol/t"),
        ("file:///data/t", "/data/t"),
    ],
)
def test_each_scheme_maps_to_what_delta_rs_and_pyarrow_read(given: str, resolved: str) -> None:
    assert resolve(given) == resolved
    assert resolve(resolved) == resolved  # resolving twice changes nothing
    assert table_uri(given) == resolved


def test_a_relative_path_becomes_absolute() -> None:
    assert resolve("data/t") == os.path.abspath("data/t")
    assert local_path("data/t") == Path(os.path.abspath("data/t"))
    assert local_path("s3a://lake/t") is None


def test_dbfs_maps_to_the_fuse_mount(dbfs: Path) -> None:
    assert resolve("dbfs:/pipelines/orders") == str(dbfs / "pipelines" / "orders")
    assert resolve("dbfs:///pipelines/orders") == str(dbfs / "pipelines" / "orders")
    assert local_path("dbfs:/p/t") == dbfs / "p" / "t"
    loc = location("dbfs:/p/chk")
    assert isinstance(loc.fs, pafs.LocalFileSystem) and loc.path == str(dbfs / "p" / "chk")


def test_dbfs_where_it_is_not_mounted_names_the_option_and_what_to_use(no_dbfs: None) -> None:
    with pytest.raises(StoragePathError) as caught:
        parse_options({**SOURCE, "offsets.table": "dbfs:/pipelines/_offsets/etl"})
    error = caught.value
    assert isinstance(error, OptionError)
    assert error.option == "offsets.table"
    assert error.path == "dbfs:/pipelines/_offsets/etl"
    assert "/Volumes/<catalog>/<schema>/<volume>" in error.problem
    assert "abfss://" in error.problem and DBFS_MOUNT_ENV in error.problem
    # it survives the pickling Spark does between its Python workers and the JVM
    assert pickle.loads(pickle.dumps(error)).option == "offsets.table"


def test_a_dbfs_uri_with_a_host_is_refused() -> None:
    with pytest.raises(StoragePathError, match="names no host"):
        resolve("dbfs://workspace/pipelines/t", "path")


@pytest.mark.parametrize("given", ["wasbs://c@acct.blob.core.windows.net/t", "http://x/t"])
def test_a_scheme_no_library_reads_is_refused_listing_what_works(given: str) -> None:
    with pytest.raises(StoragePathError) as caught:
        parse_sink_options({"path": given, "group.id": "etl", "checkpointLocation": "/chk"})
    assert caught.value.option == "path"
    assert "abfss://" in caught.value.problem and "/Volumes/" in caught.value.problem


def test_the_source_and_the_sink_keep_their_paths_resolved(dbfs: Path) -> None:
    o = parse_options(
        {
            **SOURCE,
            "offsets.table": "s3a://lake/_offsets/etl",
            "storage.aws_conditional_put": "etag",
            "sink.table": "s3n://lake/tables/orders",
            "checkpointLocation": "dbfs:/chk/etl",
        }
    )
    assert o.ledger_path == "s3://lake/_offsets/etl"
    assert o.history_path == "s3://lake/_offsets/etl_rebalances"
    assert o.sink_path == "s3://lake/tables/orders"
    assert o.checkpoint == str(dbfs / "chk" / "etl")
    s = parse_sink_options(
        {"path": "file:///data/orders", "group.id": "etl", "checkpointLocation": "dbfs:/chk/etl"}
    )
    assert (s.path, s.checkpoint) == ("/data/orders", str(dbfs / "chk" / "etl"))


def test_fuse_paths_are_databricks_mounts(dbfs: Path) -> None:
    assert is_databricks_fuse("/Volumes/main/etl/vol/t")
    assert is_databricks_fuse(resolve("dbfs:/p/t"))
    assert not is_databricks_fuse("/data/Volumes/t")
    assert not is_databricks_fuse("/Volumesx/t")
    assert not is_databricks_fuse("s3://lake/t")


@pytest.mark.parametrize("table", ["dbfs:/pipelines/_offsets/etl", "/Volumes/main/etl/v/_o"])
def test_a_ledger_on_a_fuse_mount_is_refused_without_the_single_writer_opt_in(
    dbfs: Path, table: str
) -> None:
    with pytest.raises(OptionError) as caught:
        parse_options({**SOURCE, "offsets.table": table})
    assert caught.value.option == "offsets.table"
    assert "storage.allow_unsafe_rename=true" in str(caught.value)
    assert "abfss://" in str(caught.value)


def test_the_fuse_opt_in_is_accepted_with_a_warning(
    dbfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="spark_groups")
    o = parse_options(
        {**SOURCE, "offsets.table": "dbfs:/p/_offsets/etl", "storage.allow_unsafe_rename": "true"}
    )
    assert o.ledger_path == str(dbfs / "p" / "_offsets" / "etl")
    assert "keep to one writer" in caplog.text
    with pytest.raises(OptionError) as caught:
        parse_sink_options({"path": "dbfs:/p/orders", "group.id": "etl", "checkpointLocation": "c"})
    assert caught.value.option == "path"


def test_a_checkpoint_on_a_volume_needs_no_opt_in() -> None:
    o = parse_options({**SOURCE, "checkpointLocation": "/Volumes/main/etl/vol/_chk/a"})
    assert o.checkpoint == "/Volumes/main/etl/vol/_chk/a"


def test_abfss_opens_pyarrows_azure_file_system_with_the_tables_credentials() -> None:
    loc = location(ABFSS, {"azure_storage_account_key": "a2V5"})
    assert isinstance(loc.fs, pafs.AzureFileSystem)
    assert loc.path == "lake/tables/orders"
    az = location("az://lake/t", {"azure_storage_account_name": "acct", "sas_token": "sv=1"})
    assert isinstance(az.fs, pafs.AzureFileSystem) and az.path == "lake/t"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"azure_storage_account_key": "k"}, {"account_key": "k"}),
        ({"AZURE_STORAGE_SAS_TOKEN": "sv=1"}, {"sas_token": "sv=1"}),
        (
            {"azure_client_id": "id", "azure_client_secret": "s", "azure_tenant_id": "t"},
            {"client_id": "id", "client_secret": "s", "tenant_id": "t"},
        ),
        (
            {"azure_storage_endpoint": "http://127.0.0.1:10000"},
            {
                "blob_storage_authority": "127.0.0.1:10000",
                "dfs_storage_authority": "127.0.0.1:10000",
                "blob_storage_scheme": "http",
                "dfs_storage_scheme": "http",
            },
        ),
        ({}, {}),  # pyarrow's DefaultAzureCredential
    ],
)
def test_azure_storage_options_as_pyarrow_arguments(
    options: dict[str, str], expected: dict[str, object]
) -> None:
    args = azure_filesystem_args("acct", options, option="path", path=ABFSS)
    assert args == {"account_name": "acct", **expected}


def test_azure_without_an_account_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    with pytest.raises(StoragePathError, match="azure_storage_account_name") as caught:
        check_location("az://lake/t", {}, option="checkpointLocation")
    assert caught.value.option == "checkpointLocation"


def test_a_bearer_token_pyarrow_cannot_use_is_refused_without_showing_it() -> None:
    sink = {"path": ABFSS, "group.id": "etl", "checkpointLocation": "/chk"}
    with pytest.raises(StoragePathError) as caught:
        parse_sink_options({**sink, "storage.azure_storage_token": "eyJsecret"})
    assert caught.value.option == "path"
    assert "bearer token" in str(caught.value) and "eyJsecret" not in str(caught.value)
    parse_sink_options({**sink, "storage.azure_storage_account_key": "a2V5"})  # fine


def test_gs_opens_pyarrows_gcs_file_system() -> None:
    loc = location("gs://lake/tables/orders", {"google_skip_signature": "true"})
    assert isinstance(loc.fs, pafs.GcsFileSystem)
    assert loc.path == "lake/tables/orders"


def test_a_gcs_service_account_option_points_to_the_environment_variable() -> None:
    sink = {"path": "gs://lake/t", "group.id": "etl", "checkpointLocation": "/chk"}
    key = '{"private_key": "-----BEGIN PRIVATE KEY-----secret"}'
    with pytest.raises(StoragePathError) as caught:
        parse_sink_options({**sink, "storage.google_service_account_key": key})
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(caught.value)
    assert "PRIVATE KEY" not in str(caught.value)
    # the ledger is delta-rs' alone: a service account option is fine there
    parse_options(
        {**SOURCE, "offsets.table": "gs://lake/_o", "storage.google_service_account_key": key}
    )


def test_hdfs_without_a_hadoop_client_is_a_typed_error_saying_what_is_needed() -> None:
    # Without libhdfs (here) loading fails; with it, nothing listens on port 1: either way
    # the error names the option and what a Hadoop client needs.
    with pytest.raises(StoragePathError) as caught:
        location("hdfs://127.0.0.1:1/chk/offsets", option="checkpointLocation")
    assert caught.value.option == "checkpointLocation"
    assert "libhdfs" in caught.value.problem and "hadoop classpath" in caught.value.problem
    assert len(caught.value.problem.splitlines()) == 1


def test_the_s3_guard_sees_s3n_as_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_CONDITIONAL_PUT", "AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(OptionError, match="aws_conditional_put=etag") as caught:
        check_commit_safety("s3n://lake/_offsets/etl", {}, "offsets.table")
    assert caught.value.option == "offsets.table"
    check_commit_safety("s3n://lake/_offsets/etl", {"aws_conditional_put": "etag"}, "o")
