"""Local paths and URIs as pyarrow file systems (for the sink's data files and checkpoints).

A plain path (``/data/t``, ``data/t``) or a ``file:`` URI is the local file system; any other
URI (``s3://``, ``gs://``, ``hdfs://``, ``abfs://``) is opened with pyarrow's own file system
for that scheme, configured the way pyarrow is (environment variables, instance metadata).
Delta commits themselves go through delta-rs and its ``storage_options``; see docs/sink.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from spark_groups.storage import S3_SCHEMES, s3_filesystem_args


def _is_uri(path: str) -> bool:
    scheme = urlparse(path).scheme
    return bool(scheme) and len(scheme) > 1  # not a Windows drive letter


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


def location(path: str, storage_options: Mapping[str, str] | None = None) -> Location:
    """Open ``path`` (a local path, ``file:`` URI or another URI pyarrow understands).

    ``s3://`` and ``s3a://`` are opened with the credentials, region and endpoint of
    ``storage_options`` (delta-rs' names, see :mod:`spark_groups.storage`) where given,
    so the files land on the same store as the table's commits."""
    if not _is_uri(path):
        return Location(pafs.LocalFileSystem(), os.path.abspath(path))
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return Location(pafs.LocalFileSystem(), os.path.abspath(unquote(parsed.path)))
    if parsed.scheme.lower() in S3_SCHEMES:
        args = s3_filesystem_args(storage_options or {})
        fs = pafs.S3FileSystem(**args)
        return Location(fs, f"{parsed.netloc}{unquote(parsed.path)}".rstrip("/"))
    fs, inner = pafs.FileSystem.from_uri(path)
    return Location(fs, inner)


def table_uri(path: str) -> str:
    """``path`` in the form to give delta-rs: absolute for local paths, URIs unchanged."""
    if not _is_uri(path):
        return os.path.abspath(path)
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    return path


def local_path(path: str) -> Path | None:
    """The local file-system path of ``path``, or ``None`` for a remote URI."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:  # not a Windows drive letter
        return None
    return Path(path)
