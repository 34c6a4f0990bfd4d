"""Table and checkpoint paths as pyarrow file systems (the sink's data files, checkpoints).

Every path goes through :func:`spark_groups.storage.paths.resolve` first (``s3a://`` to ``s3://``,
``dbfs:/`` to the FUSE path ...). A local or FUSE path is the local file system; ``s3://``,
``abfss://``/``abfs://``/``az://``, ``gs://``, ``hdfs://``/``viewfs://`` are opened with
pyarrow's file system for that store, configured from the same ``storage_options`` as the
table's Delta commits (delta-rs' names, see :mod:`spark_groups.storage`), so files and
commits reach the same store with the same credentials. Delta commits themselves go through
delta-rs; see docs/storage.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from spark_groups.errors import StoragePathError
from spark_groups.storage.object_stores import (
    azure_filesystem_args,
    gcs_filesystem_args,
    s3_filesystem_args,
)
from spark_groups.storage.paths import resolve, scheme_of

_AZURE = frozenset({"abfss", "abfs", "az"})
_HADOOP = frozenset({"hdfs", "viewfs"})


@dataclass(frozen=True)
class Location:
    """A directory or file: the file system that holds it and its path inside that system."""

    fs: pafs.FileSystem
    path: str

    def child(self, relative: str) -> str:
        """The path (in :attr:`fs`) of ``relative`` (``/``-separated) below this location."""
        return f"{self.path.rstrip('/')}/{relative.lstrip('/')}"

    def exists(self, path: str) -> bool:
        """Whether a file exists at ``path`` (in :attr:`fs`)."""
        return self.fs.get_file_info(path).type == pafs.FileType.File

    def read_text(self, path: str) -> str:
        """The UTF-8 text of the file at ``path`` (in :attr:`fs`)."""
        with self.fs.open_input_stream(path) as stream:
            return stream.read().decode("utf-8")


def location(
    path: str, storage_options: Mapping[str, str] | None = None, *, option: str = "path"
) -> Location:
    """Open ``path`` (see :func:`spark_groups.storage.paths.resolve`) with the pyarrow file system
    of its store, configured from ``storage_options``.

    Raises :class:`~spark_groups.errors.StoragePathError` naming ``option`` when the path
    or its options cannot be opened with pyarrow here (this build has no file system for the
    store, libhdfs is missing, credentials pyarrow cannot take)."""
    resolved = resolve(path, option)
    scheme = scheme_of(resolved)
    if not scheme:
        return Location(pafs.LocalFileSystem(), resolved)
    given = storage_options or {}
    parsed = urlparse(resolved)
    inner = unquote(parsed.path)
    if scheme == "s3":
        fs = pafs.S3FileSystem(**s3_filesystem_args(given))
        return Location(fs, f"{parsed.netloc}{inner}".rstrip("/"))
    if scheme in _AZURE:
        return _azure(path, resolved, given, option)
    if scheme == "gs":
        fs = pafs.GcsFileSystem(**gcs_filesystem_args(given, option=option, path=path))
        return Location(fs, f"{parsed.netloc}{inner}".rstrip("/"))
    if scheme in _HADOOP:
        return _hadoop(path, resolved, option)
    raise StoragePathError(option, path, f"pyarrow has no file system for {scheme}:// here")


def check_location(
    path: str, storage_options: Mapping[str, str] | None = None, *, option: str
) -> str:
    """``path`` resolved (:func:`spark_groups.storage.paths.resolve`), once checked that pyarrow can
    open it with ``storage_options`` here, without connecting anywhere (so at option
    parsing, naming ``option``). HDFS is only checked when it is opened (libhdfs starts a
    JVM)."""
    resolved = resolve(path, option)
    scheme = scheme_of(resolved)
    if scheme in _AZURE:
        _azure_args(path, resolved, storage_options or {}, option)
    elif scheme == "gs":
        gcs_filesystem_args(storage_options or {}, option=option, path=path)
    return resolved


def _azure_args(
    path: str, resolved: str, given: Mapping[str, str], option: str
) -> tuple[str, dict[str, object]]:
    """The container and the ``AzureFileSystem`` arguments of
    ``abfss://<container>@<account>.dfs.core.windows.net/<path>`` (or ``abfs://``), or of
    ``az://<container>/<path>`` with the account in the options."""
    if not hasattr(pafs, "AzureFileSystem"):
        raise StoragePathError(
            option,
            path,
            "this pyarrow has no AzureFileSystem (pyarrow 16 or later, built with Azure "
            "support, has it); upgrade pyarrow on the driver and executors",
        )
    parsed = urlparse(resolved)
    if "@" in parsed.netloc:
        container = parsed.username or ""
        account = (parsed.hostname or "").split(".", 1)[0] or None
    else:
        container, account = parsed.netloc, None
    return container, azure_filesystem_args(account, given, option=option, path=path)


def _azure(path: str, resolved: str, given: Mapping[str, str], option: str) -> Location:
    container, args = _azure_args(path, resolved, given, option)
    fs = pafs.AzureFileSystem(**args)
    return Location(fs, f"{container}{unquote(urlparse(resolved).path)}".rstrip("/"))


def _hadoop(path: str, resolved: str, option: str) -> Location:
    """HDFS through libhdfs (a Hadoop client on this machine)."""
    try:
        fs, inner = pafs.FileSystem.from_uri(resolved)
    except (OSError, ImportError) as exc:
        raise StoragePathError(
            option,
            path,
            f"pyarrow could not open HDFS ({type(exc).__name__}: {_first_line(exc)}). It "
            "needs a Hadoop "
            "client on the driver and every executor: libhdfs.so (ARROW_LIBHDFS_DIR or "
            "HADOOP_HOME/lib/native), JAVA_HOME, and CLASSPATH=$(hadoop classpath --glob)",
        ) from exc
    return Location(fs, inner)


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (libhdfs lists every JVM path it tried)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def table_uri(path: str, option: str = "path") -> str:
    """``path`` in the form to give delta-rs (:func:`spark_groups.storage.paths.resolve`)."""
    return resolve(path, option)


def local_path(path: str) -> Path | None:
    """The local file-system path of ``path`` (a FUSE path for ``dbfs:/``), or ``None``
    for a remote URI."""
    resolved = resolve(path)
    return None if scheme_of(resolved) else Path(resolved)
