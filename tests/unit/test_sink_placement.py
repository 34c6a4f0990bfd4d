"""A sink table on the local disk is refused when the executors run on a cluster."""

from __future__ import annotations

import pickle

import pytest

from spark_groups import LocalTableOnClusterError, OptionError
from spark_groups.options.sink import parse_sink_options
from spark_groups.sink.placement import check_table_reachable, is_local_master, is_shared_mount

CLUSTERS = ["spark://10.0.0.5:7077", "yarn", "k8s://https://api:6443", "mesos://m:5050"]


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4, 3]",
                                    "local-cluster[2, 1, 1024]"])  # fmt: skip
def test_local_masters_accept_local_paths(master: str) -> None:
    assert is_local_master(master)
    for path in ("/data/t", "data/t", "file:///data/t"):
        check_table_reachable(path, master)


@pytest.mark.parametrize("master", CLUSTERS)
@pytest.mark.parametrize("path", ["/data/tables/orders", "tables/orders", "file:///data/t"])
def test_a_local_path_on_a_cluster_is_refused_naming_the_option(master: str, path: str) -> None:
    with pytest.raises(LocalTableOnClusterError) as caught:
        check_table_reachable(path, master)
    error = caught.value
    assert isinstance(error, OptionError) and error.option == "path"
    assert (error.path, error.master) == (path, master)
    message = str(error)
    assert "own machine's disk" in message and "sharedMount=true" in message
    assert "s3://" in message and "/Volumes/" in message and "nothing was written" in message
    # It crosses process boundaries (Spark's Python workers) unchanged.
    again = pickle.loads(pickle.dumps(error))
    assert (again.path, again.master, str(again)) == (path, master, message)


@pytest.mark.parametrize("master", CLUSTERS)
@pytest.mark.parametrize(
    "path",
    ["s3://lake/t", "s3a://lake/t", "abfss://c@a.dfs.core.windows.net/t", "hdfs://nn/t",
     "/dbfs/tables/t", "/Volumes/main/default/v/t", "file:///dbfs/t"],
)  # fmt: skip
def test_object_stores_and_known_shared_mounts_pass_on_a_cluster(master: str, path: str) -> None:
    check_table_reachable(path, master)


def test_shared_mount_opts_out_and_an_unknown_master_is_not_checked() -> None:
    check_table_reachable("/mnt/nfs/t", "yarn", shared_mount=True)
    check_table_reachable("/mnt/nfs/t", None)
    check_table_reachable("/mnt/nfs/t", "")
    assert not is_shared_mount("/Volumesx/t") and not is_shared_mount("/dbfsx/t")
    assert is_shared_mount("/Volumes/main/s/v") and is_shared_mount("/dbfs")


def test_the_sink_option_shared_mount() -> None:
    base = {"path": "/t", "group.id": "g", "checkpointlocation": "/cp"}
    assert parse_sink_options(base).shared_mount is False
    assert parse_sink_options({**base, "sharedmount": "TRUE"}).shared_mount is True
    with pytest.raises(OptionError) as caught:
        parse_sink_options({**base, "sharedmount": "nfs"})
    assert caught.value.option == "sharedMount"


def test_a_dbfs_uri_and_the_configured_dbfs_mount_are_shared(tmp_path, monkeypatch) -> None:
    mount = tmp_path / "dbfs"
    mount.mkdir()
    monkeypatch.setenv("SPARK_GROUPS_DBFS_MOUNT", str(mount))
    check_table_reachable("dbfs:/tables/orders", "yarn")
    check_table_reachable(str(mount / "tables" / "orders"), "yarn")
    with pytest.raises(LocalTableOnClusterError):
        check_table_reachable(str(tmp_path / "elsewhere"), "yarn")
