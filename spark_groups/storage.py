"""Storage options of the tables on object stores, and whether concurrent commits are safe.

Every Delta table spark_groups keeps (the offsets ledger, the rebalance history, the
``delta-group`` sink's table) may live on an object store. Its credentials and settings go
through ``storage.*`` options (the source's and the sink's), passed to delta-rs as its
``storage_options`` (``storage.AWS_ACCESS_KEY_ID`` -> ``AWS_ACCESS_KEY_ID``), or through the
environment delta-rs reads (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL`` ...).

S3 has no atomic rename, so delta-rs makes two writers' commits of the same table version
safe only with conditional writes (``aws_conditional_put=etag``: S3 itself, MinIO, R2) or a
locking provider (``aws_s3_locking_provider=dynamodb``). Without either, delta-rs 1.6 still
writes, and two members can both write the same log version, one silently replacing the
other's commit. :func:`check_commit_safety` refuses that setup unless the user opted in with
``aws_s3_allow_unsafe_rename=true`` (docs/storage.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from urllib.parse import urlparse

from spark_groups.errors import OptionError

log = logging.getLogger(__name__)

#: Prefix of options passed to delta-rs as storage options (``storage.aws_region`` ...).
STORAGE_PREFIX = "storage."

#: URI schemes that reach Amazon S3 or an S3-compatible store through delta-rs.
S3_SCHEMES = frozenset({"s3", "s3a"})

_CONDITIONAL_PUT = ("aws_conditional_put", "conditional_put")
_LOCKING = ("aws_s3_locking_provider",)
_UNSAFE_OPT_IN = ("aws_s3_allow_unsafe_rename",)


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


def check_commit_safety(
    uri: str, storage_options: Mapping[str, str] | None, option: str, *, prefix: str = ""
) -> None:
    """Refuse a table on S3 whose commits would not be safe beside another writer.

    Safe: ``aws_conditional_put=etag`` or an ``aws_s3_locking_provider`` (in the storage
    options or the environment). Allowed with a warning: ``aws_s3_allow_unsafe_rename=true``
    (one writer only, the user's explicit choice). Anything else raises
    :class:`~spark_groups.errors.OptionError` on ``option`` (the option that named the
    table) saying what to set; ``prefix`` is how the user writes storage options there
    (``storage.``). Other schemes and local paths pass.
    """
    if not is_s3(uri):
        return
    given = storage_options or {}
    conditional = _setting(_CONDITIONAL_PUT, given)
    if conditional is not None and conditional.lower() == "etag":
        return
    if _setting(_LOCKING, given):
        return
    unsafe = _setting(_UNSAFE_OPT_IN, given)
    if unsafe is not None and unsafe.lower() == "true":
        log.warning(
            "%s on S3 without conditional writes or a locking provider "
            "(aws_s3_allow_unsafe_rename=true): two writers of this table can overwrite "
            "each other's commits; keep to one writer",
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
