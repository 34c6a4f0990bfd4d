"""Storage options of the tables on object stores, and whether concurrent commits are safe.

Every Delta table spark_groups keeps may live on an object store; its settings come from the
``storage.*`` options (passed to delta-rs as ``storage_options``, without the prefix) or the
environment delta-rs reads. :func:`check_commit_safety` refuses a table whose concurrent
commits would be unsafe: on S3 without conditional writes or a lock (unless the user opted in
for one writer), and on Databricks' FUSE mounts without ``allow_unsafe_rename=true``;
:func:`one_writer_opt_in` names the opt-in a table is committed under, which the group then
holds to one member (``spark_groups.group.one_writer``).
:func:`s3_filesystem_args`, :func:`azure_filesystem_args` and :func:`gcs_filesystem_args`
give pyarrow's file systems (the sink's data files, checkpoints) the same store and
credentials. docs/storage.md, "Two design facts" and "The guard".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from urllib.parse import urlparse

from spark_groups.errors import OptionError, StoragePathError
from spark_groups.storage.paths import is_databricks_fuse, resolve

log = logging.getLogger(__name__)

#: Prefix of options passed to delta-rs as storage options (``storage.aws_region`` ...).
STORAGE_PREFIX = "storage."

#: URI schemes that reach Amazon S3 or an S3-compatible store through delta-rs.
S3_SCHEMES = frozenset({"s3", "s3a"})

_CONDITIONAL_PUT = ("aws_conditional_put", "conditional_put")
_LOCKING = ("aws_s3_locking_provider",)
_UNSAFE_OPT_IN = ("aws_s3_allow_unsafe_rename",)
#: delta-rs' opt-in to plain (check, then rename) commits on a mounted file system.
_MOUNT_OPT_IN = ("allow_unsafe_rename", "mount_allow_unsafe_rename")
_MOUNT_OPT_IN_ENV = "MOUNT_ALLOW_UNSAFE_RENAME"


def storage_options_of(options: Mapping[str, str]) -> dict[str, str]:
    """The ``storage.*`` entries of a query's options, without the prefix (keys as given
    after it; Spark lower-cases option names, delta-rs accepts either case)."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith(STORAGE_PREFIX) and len(key) > len(STORAGE_PREFIX):
            out[key[len(STORAGE_PREFIX) :]] = str(value)
    return out


def _setting(names: tuple[str, ...], storage_options: Mapping[str, str]) -> str | None:
    """The value of the first of ``names`` in ``storage_options`` (any case), else in the
    environment (upper case, as delta-rs reads it)."""
    lowered = {k.lower(): v for k, v in storage_options.items()}
    for name in names:
        if name in lowered:
            return lowered[name].strip()
    for name in names:
        value = os.environ.get(name.upper())
        if value is not None:
            return value.strip()
    return None


def is_s3(uri: str) -> bool:
    """Whether ``uri`` is on S3 or an S3-compatible store (``s3://``, ``s3a://``)."""
    return urlparse(uri).scheme.lower() in S3_SCHEMES


def one_writer_opt_in(uri: str, storage_options: Mapping[str, str] | None) -> str | None:
    """The opt-in under which delta-rs commits to the table at ``uri`` as check-then-rename,
    safe for one writer only: ``allow_unsafe_rename`` on a Databricks FUSE mount,
    ``aws_s3_allow_unsafe_rename`` on S3 without conditional writes or a lock; None where
    commits are atomic (or the path is not one :func:`check_commit_safety` accepts)."""
    given = storage_options or {}
    try:
        resolved = resolve(uri, "path")
    except StoragePathError:
        return None
    if is_databricks_fuse(resolved):
        return _MOUNT_OPT_IN[0] if _fuse_opted_in(given) else None
    if not is_s3(resolved) or _s3_atomic(given):
        return None
    unsafe = _setting(_UNSAFE_OPT_IN, given)
    return _UNSAFE_OPT_IN[0] if unsafe is not None and unsafe.lower() == "true" else None


def _s3_atomic(given: Mapping[str, str]) -> bool:
    """Whether delta-rs commits to S3 atomically: conditional writes (``etag``) or a lock."""
    conditional = _setting(_CONDITIONAL_PUT, given)
    return (conditional is not None and conditional.lower() == "etag") or bool(
        _setting(_LOCKING, given)
    )


def check_commit_safety(
    uri: str, storage_options: Mapping[str, str] | None, option: str, *, prefix: str = ""
) -> None:
    """Refuse a table whose commits would not be safe beside another writer.

    On S3, safe means ``aws_conditional_put=etag`` or an ``aws_s3_locking_provider`` (in the
    storage options or the environment); allowed with a warning: ``aws_s3_allow_unsafe_rename
    =true`` (one writer only, the user's explicit choice). On Databricks' FUSE mounts (DBFS,
    Unity Catalog volumes) nothing is safe: delta-rs commits there only with
    ``allow_unsafe_rename=true`` (``MOUNT_ALLOW_UNSAFE_RENAME``), allowed with a warning.
    Anything else raises :class:`~spark_groups.errors.OptionError` on ``option`` (the
    option that named the table) saying what to set; ``prefix`` is how the user writes
    storage options there (``storage.``). Other stores and local paths pass; a path no
    library reads raises :class:`~spark_groups.errors.StoragePathError`.
    """
    given = storage_options or {}
    resolved = resolve(uri, option)  # s3n:// is S3 too
    if is_databricks_fuse(resolved):
        _check_fuse(uri, given, option, prefix)
        return
    if not is_s3(resolved) or _s3_atomic(given):
        return
    conditional = _setting(_CONDITIONAL_PUT, given)
    unsafe = _setting(_UNSAFE_OPT_IN, given)
    if unsafe is not None and unsafe.lower() == "true":
        log.warning(
            "%s on S3 without conditional writes or a locking provider "
            "(aws_s3_allow_unsafe_rename=true): two writers of this table can overwrite "
            "each other's commits; keep to one writer (a second member of the group is "
            "refused)",
            option,
        )
        return
    found = f" (aws_conditional_put is {conditional!r})" if conditional else ""
    raise OptionError(
        option,
        f"the Delta table {uri} is on S3, where concurrent commits are safe only with "
        f"conditional writes or a lock, and neither is configured{found}. Set "
        f"{prefix}aws_conditional_put=etag (S3, MinIO, R2 and other stores with "
        f"If-None-Match), or {prefix}aws_s3_locking_provider=dynamodb with its lock table, "
        "or the same as environment variables (AWS_CONDITIONAL_PUT=etag); to accept the "
        f"risk with a single writer, set {prefix}aws_s3_allow_unsafe_rename=true "
        "(docs/storage.md)",
    )


def check_task_written(
    uri: str, storage_options: Mapping[str, str] | None, option: str, *, prefix: str = ""
) -> None:
    """Refuse a table that Spark's tasks commit to, many at once (a dead-letter table),
    where concurrent commits are unsafe: :func:`check_commit_safety`, and no one-writer
    opt-in either (:func:`refuse_one_writer`). Raises
    :class:`~spark_groups.errors.OptionError` on ``option``."""
    check_commit_safety(uri, storage_options, option, prefix=prefix)
    refuse_one_writer(
        uri,
        storage_options,
        option,
        "Spark's tasks write it, several at once, so their commits could overwrite each other's",
        prefix=prefix,
    )


def refuse_one_writer(
    uri: str, storage_options: Mapping[str, str] | None, option: str, why: str, *, prefix: str = ""
) -> None:
    """Refuse ``uri`` when it is committed to under a one-writer opt-in
    (:func:`one_writer_opt_in`) and its writers cannot be held to one, for the reason ``why``.
    Raises :class:`~spark_groups.errors.OptionError` on ``option``, naming the opt-in."""
    opt_in = one_writer_opt_in(uri, storage_options)
    if opt_in is None:
        return
    raise OptionError(
        option,
        f"the Delta table {uri} is committed to as check-then-rename ({prefix}{opt_in}=true), "
        f"safe for one writer only, and {why}. Put it where commits are atomic: a local disk, "
        f"or the object store itself (abfss://, gs://, or s3:// with "
        f'{prefix}aws_conditional_put=etag) (docs/storage.md, "One writer")',
    )


def _fuse_opted_in(given: Mapping[str, str]) -> bool:
    lowered = {k.lower(): v.strip().lower() for k, v in given.items()}
    values = [lowered[name] for name in _MOUNT_OPT_IN if name in lowered]
    values.append(os.environ.get(_MOUNT_OPT_IN_ENV, "").strip().lower())
    return "true" in values


def _check_fuse(uri: str, given: Mapping[str, str], option: str, prefix: str) -> None:
    if _fuse_opted_in(given):
        log.warning(
            "%s on a Databricks FUSE mount (allow_unsafe_rename=true): two writers of this "
            "table can overwrite each other's commits; keep to one writer (a second member of "
            "the group is refused)",
            option,
        )
        return
    raise OptionError(
        option,
        f"the Delta table {uri} is on a Databricks FUSE mount (DBFS or a Unity Catalog "
        "volume), which offers no atomic create-if-absent: delta-rs commits there only as a "
        "check-then-rename, with which two members can overwrite each other's commit. Put "
        "the table on the object store itself (abfss://, s3://, gs://, with its credentials "
        f"as {prefix}* options); to accept the risk with a single writer, set "
        f"{prefix}allow_unsafe_rename=true. Checkpoints on a volume are fine "
        "(docs/storage.md)",
    )


def _lookup(storage_options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in storage_options.items()}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None


def s3_filesystem_args(storage_options: Mapping[str, str]) -> dict[str, object]:
    """pyarrow ``S3FileSystem`` arguments equivalent to delta-rs ``storage_options`` (for
    the sink's data files, which pyarrow writes): keys, token, region and endpoint. Settings
    not given here are left to pyarrow's own defaults (the environment, instance metadata)."""
    args: dict[str, object] = {}
    key = _lookup(storage_options, "aws_access_key_id", "access_key_id")
    secret = _lookup(storage_options, "aws_secret_access_key", "secret_access_key")
    token = _lookup(storage_options, "aws_session_token", "session_token", "aws_token", "token")
    if key and secret:
        args.update(access_key=key, secret_key=secret)
        if token:
            args["session_token"] = token
    region = _lookup(storage_options, "aws_region", "region", "aws_default_region")
    if region:
        args["region"] = region
    endpoint = _lookup(
        storage_options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"
    )
    if endpoint:
        parsed = urlparse(endpoint)
        if parsed.scheme in ("http", "https"):
            args["scheme"] = parsed.scheme
            args["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
        else:
            args["endpoint_override"] = endpoint
    return args


#: Azure keys with no pyarrow equivalent: a bearer token (delta-rs' ``azure_storage_token``).
_AZURE_UNTRANSLATABLE = ("azure_storage_token", "bearer_token", "token")
#: Google service-account keys pyarrow's GCS file system cannot take as arguments.
_GCS_UNTRANSLATABLE = (
    "google_service_account",
    "service_account",
    "google_service_account_path",
    "service_account_path",
    "google_service_account_key",
    "service_account_key",
    "google_application_credentials",
)


def azure_filesystem_args(
    account: str | None, storage_options: Mapping[str, str], *, option: str, path: str
) -> dict[str, object]:
    """pyarrow ``AzureFileSystem`` arguments equivalent to delta-rs ``storage_options``:
    the account (``account`` from the URI, else ``azure_storage_account_name``), and an
    account key, a SAS token or a service principal (client id, secret, tenant). Without
    credentials pyarrow uses Azure's DefaultAzureCredential (environment, managed
    identity). Raises :class:`~spark_groups.errors.StoragePathError` on ``option`` when the
    account is unknown or the only credential is a bearer token, which pyarrow cannot use."""
    name = account or _lookup(storage_options, "azure_storage_account_name", "account_name")
    name = name or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    if not name:
        raise StoragePathError(
            option,
            path,
            "names no storage account: write abfss://<container>@<account>.dfs.core."
            "windows.net/<path>, or set storage.azure_storage_account_name",
        )
    args: dict[str, object] = {"account_name": name}
    key = _lookup(
        storage_options,
        "azure_storage_account_key",
        "azure_storage_access_key",
        "azure_storage_master_key",
        "account_key",
        "access_key",
        "master_key",
    )
    sas = _lookup(
        storage_options, "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token"
    )
    client = _lookup(storage_options, "azure_storage_client_id", "azure_client_id", "client_id")
    secret = _lookup(
        storage_options, "azure_storage_client_secret", "azure_client_secret", "client_secret"
    )
    tenant = _lookup(
        storage_options,
        "azure_storage_tenant_id",
        "azure_storage_authority_id",
        "azure_tenant_id",
        "azure_authority_id",
        "tenant_id",
        "authority_id",
    )
    if key:
        args["account_key"] = key
    elif sas:
        args["sas_token"] = sas
    elif client and secret and tenant:
        args.update(client_id=client, client_secret=secret, tenant_id=tenant)
    elif _lookup(storage_options, *_AZURE_UNTRANSLATABLE):
        raise StoragePathError(
            option,
            path,
            "pyarrow's Azure file system (which reads and writes the files here) takes no "
            "bearer token (storage.azure_storage_token); give an account key, a SAS token or "
            "a service principal (azure_client_id, azure_client_secret, azure_tenant_id) as "
            "storage.* options, or none to use DefaultAzureCredential",
        )
    endpoint = _lookup(storage_options, "azure_storage_endpoint", "azure_endpoint", "endpoint")
    if endpoint:
        parsed = urlparse(endpoint)
        authority = parsed.netloc or endpoint
        args.update(blob_storage_authority=authority, dfs_storage_authority=authority)
        if parsed.scheme in ("http", "https"):
            args.update(blob_storage_scheme=parsed.scheme, dfs_storage_scheme=parsed.scheme)
    return args


def gcs_filesystem_args(
    storage_options: Mapping[str, str], *, option: str, path: str
) -> dict[str, object]:
    """pyarrow ``GcsFileSystem`` arguments equivalent to delta-rs ``storage_options``.

    pyarrow's GCS client finds its credentials itself (``GOOGLE_APPLICATION_CREDENTIALS``,
    the machine's service account) and takes no key file or key as an argument, so a
    service account given only as a storage option raises
    :class:`~spark_groups.errors.StoragePathError` on ``option``, saying to set the
    environment variable (which delta-rs reads too) instead."""
    given = sorted(k for k in storage_options if k.lower() in _GCS_UNTRANSLATABLE)
    if given:
        raise StoragePathError(
            option,
            path,
            f"pyarrow's GCS file system (which reads and writes the files here) cannot take "
            f"{', '.join('storage.' + k for k in given)}: it reads its credentials from "
            "GOOGLE_APPLICATION_CREDENTIALS or the machine's service account. Set "
            "GOOGLE_APPLICATION_CREDENTIALS to the key file on the driver and the executors "
            "(spark.executorEnv.GOOGLE_APPLICATION_CREDENTIALS); delta-rs reads it too",
        )
    args: dict[str, object] = {}
    skip = _lookup(storage_options, "google_skip_signature", "skip_signature")
    if skip is not None and skip.strip().lower() == "true":
        args["anonymous"] = True
    return args
