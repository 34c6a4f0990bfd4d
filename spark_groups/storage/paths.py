"""A user's table or checkpoint path, in the form delta-rs and pyarrow take.

:func:`resolve` is the one place that maps the paths Spark users write to the schemes the two
libraries know: a plain path or ``file:`` URI becomes the absolute local path; ``s3a://`` and
``s3n://`` become ``s3://``; ``dbfs:/Volumes/...`` the volume's FUSE path, any other
``dbfs:/x`` the DBFS FUSE path (``/dbfs/x``, or below :data:`DBFS_MOUNT_ENV`'s directory;
elsewhere an error); ``abfss://``, ``abfs://``, ``az://``, ``gs://``, ``hdfs://`` and
``viewfs://`` stay as they are; anything else is a
:class:`~spark_groups.errors.StoragePathError` listing what works. Resolving a resolved path
gives it back unchanged. docs/storage.md, "Paths: what you may write".
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from spark_groups.errors import StoragePathError

#: Where the DBFS FUSE mount is when this environment variable does not say otherwise.
DBFS_MOUNT = "/dbfs"

#: The environment variable naming another directory as the DBFS FUSE mount.
DBFS_MOUNT_ENV = "SPARK_GROUPS_DBFS_MOUNT"

#: Unity Catalog volumes' FUSE root on Databricks.
VOLUMES_ROOT = "/Volumes"

#: Schemes passed on as they are: delta-rs reads them, files.py opens them with pyarrow.
NATIVE_SCHEMES = frozenset({"s3", "abfss", "abfs", "az", "gs", "hdfs", "viewfs"})

#: Hadoop's S3 schemes, read as ``s3://``.
S3_ALIASES = frozenset({"s3a", "s3n"})

_ADVICE = (
    "use a local or FUSE path (/Volumes/<catalog>/<schema>/<volume>/...), or an object-store "
    "URI: s3:// (or s3a://), abfss://<container>@<account>.dfs.core.windows.net/..., gs://, "
    "hdfs:// (docs/storage.md)"
)


def scheme_of(path: str) -> str:
    """The URI scheme of ``path``, lower case; ``""`` for a local path (a Windows drive
    letter is not a scheme)."""
    scheme = urlparse(path).scheme.lower()
    return scheme if len(scheme) > 1 else ""


def dbfs_mount() -> str:
    """The directory where DBFS is mounted: ``$SPARK_GROUPS_DBFS_MOUNT``, else ``/dbfs``."""
    return os.environ.get(DBFS_MOUNT_ENV, "").strip() or DBFS_MOUNT


def resolve(path: str, option: str = "path") -> str:
    """``path`` as delta-rs and pyarrow take it (see the module's docstring).

    Raises :class:`~spark_groups.errors.StoragePathError` naming ``option`` (the option
    that gave the path) for a scheme neither library reads, or for ``dbfs:/`` where DBFS
    is not mounted."""
    scheme = scheme_of(path)
    if not scheme:
        return os.path.abspath(path)
    parsed = urlparse(path)
    if scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    if scheme in S3_ALIASES:
        return "s3" + path[len(scheme) :]
    if scheme == "dbfs":
        return _dbfs(path, option)
    if scheme in NATIVE_SCHEMES:
        return path
    raise StoragePathError(
        option, path, f"neither delta-rs nor pyarrow reads the scheme {scheme}:// here; {_ADVICE}"
    )


def _dbfs(path: str, option: str) -> str:
    parsed = urlparse(path)
    if parsed.netloc:
        raise StoragePathError(
            option,
            path,
            f"a dbfs: URI names no host ({parsed.netloc!r} given); write dbfs:/<path> or the "
            f"FUSE path {DBFS_MOUNT}/<path>",
        )
    inner = "/" + unquote(parsed.path).lstrip("/")
    if inner == VOLUMES_ROOT or inner.startswith(VOLUMES_ROOT + "/"):
        return os.path.normpath(inner)
    mount = dbfs_mount()
    if not os.path.isdir(mount):
        raise StoragePathError(
            option,
            path,
            f"dbfs:/ is read through the DBFS FUSE mount {mount}, which this machine does not "
            "have (it is there on a Databricks cluster). Outside Databricks, or where DBFS is "
            "disabled, give an object-store URI (s3://, abfss://, gs://) or a Unity Catalog "
            f"volume path {VOLUMES_ROOT}/<catalog>/<schema>/<volume>/...; if DBFS is mounted "
            f"elsewhere, set {DBFS_MOUNT_ENV} to that directory",
        )
    return os.path.normpath(mount.rstrip("/") + inner)


def is_databricks_fuse(resolved: str) -> bool:
    """Whether the resolved path ``resolved`` is on one of Databricks' FUSE mounts (DBFS or
    a Unity Catalog volume), where a Delta commit has no atomic create-if-absent."""
    if scheme_of(resolved):
        return False
    for root in (dbfs_mount(), VOLUMES_ROOT):
        root = os.path.normpath(root)
        if resolved == root or resolved.startswith(root.rstrip("/") + "/"):
            return True
    return False
