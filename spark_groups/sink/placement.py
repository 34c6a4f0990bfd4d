"""Whether the executors of a query can write the sink's table where its path points.

A table on the local disk (no scheme, or ``file:``) is one place only when every executor
runs on the driver's machine (``local[...]``, ``local-cluster[...]``). On a cluster the sink
refuses it (:class:`~spark_groups.errors.LocalTableOnClusterError`) unless the path is a
mount every node shares: DBFS and Unity Catalog volumes (``spark_groups.storage.paths``), or
any other the user declares with ``sharedMount=true``. The check runs in the tasks, before
they write: the master is their local property ``spark.master``, and the driver-side calls
get neither a task context nor the Spark conf. docs/storage.md, "On a cluster".
"""

from __future__ import annotations

import logging

from spark_groups.errors import LocalTableOnClusterError
from spark_groups.storage.files import local_path
from spark_groups.storage.paths import is_databricks_fuse

log = logging.getLogger(__name__)


def is_local_master(master: str) -> bool:
    """Whether executors of ``master`` all run on the driver's machine (``local``,
    ``local[N]``, ``local[*, F]``, ``local-cluster[...]``)."""
    return master.strip().lower().startswith("local")


def is_shared_mount(path: str) -> bool:
    """Whether the local ``path`` is on a mount every node of its platform shares:
    Databricks' DBFS (``/dbfs``, or ``$SPARK_GROUPS_DBFS_MOUNT``) or a Unity Catalog volume
    (``/Volumes``), also when given as ``dbfs:/...``."""
    resolved = local_path(path)
    return resolved is not None and is_databricks_fuse(str(resolved))


def check_table_reachable(path: str, master: str | None, shared_mount: bool = False) -> None:
    """Refuse a sink table on the local disk when the executors run on a cluster.

    ``path`` is the sink's ``path`` option, ``master`` the query's Spark master (``None``
    when unknown: nothing to check), ``shared_mount`` the sink option ``sharedMount``.
    Raises :class:`~spark_groups.errors.LocalTableOnClusterError`; passes for URIs (an
    object store, HDFS), local masters, known shared mounts and ``sharedMount=true``.
    """
    if not master or is_local_master(master):
        return
    if local_path(path) is None or is_shared_mount(path):
        return
    if shared_mount:
        log.debug("sink %s: local path on %s accepted (sharedMount=true)", path, master)
        return
    raise LocalTableOnClusterError(path, master)
