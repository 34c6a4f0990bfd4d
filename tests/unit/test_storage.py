"""Storage options and the guard against unsafe concurrent commits on S3 (no server)."""

from __future__ import annotations

import logging

import pytest

from spark_groups.errors import OptionError
from spark_groups.options import parse_options
from spark_groups.options.sink import parse_sink_options
from spark_groups.secrets import is_secret, redact
from spark_groups.storage.files import location
from spark_groups.storage.object_stores import (
    check_commit_safety,
    s3_filesystem_args,
    storage_options_of,
)

SOURCE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "group.id": "etl"}
SINK = {"path": "s3://b/orders", "group.id": "etl", "checkpointLocation": "/chk/orders"}
KEYS = {"storage.aws_access_key_id": "AKIDEXAMPLE", "storage.aws_secret_access_key": "s3cr3t"}


@pytest.fixture(autouse=True)
def _no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_CONDITIONAL_PUT", "AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME"):
        monkeypatch.delenv(name, raising=False)


def test_a_ledger_on_s3_without_conditional_put_or_lock_is_refused_naming_what_to_set() -> None:
    with pytest.raises(OptionError) as caught:
        parse_options({**SOURCE, **KEYS, "offsets.table": "s3://b/_offsets/etl"})
    assert caught.value.option == "offsets.table"
    message = str(caught.value)
    assert "storage.aws_conditional_put=etag" in message
    assert "storage.aws_s3_locking_provider" in message
    assert "storage.aws_s3_allow_unsafe_rename=true" in message
    assert "s3cr3t" not in message


def test_an_explicit_rebalances_table_on_s3_is_refused_under_its_own_name() -> None:
    with pytest.raises(OptionError) as caught:
        parse_options(
            {
                **SOURCE,
                "offsets.table": "/data/_offsets/etl",
                "rebalances.table": "s3a://b/_rebalances/etl",
            }
        )
    assert caught.value.option == "rebalances.table"


@pytest.mark.parametrize(
    "setting",
    [
        {"storage.aws_conditional_put": "etag"},
        {"storage.AWS_CONDITIONAL_PUT": "ETag"},
        {"storage.conditional_put": "etag"},
        {"storage.aws_s3_locking_provider": "dynamodb"},
    ],
)
def test_conditional_put_or_a_lock_makes_the_ledger_on_s3_safe(setting: dict[str, str]) -> None:
    o = parse_options({**SOURCE, **KEYS, **setting, "offsets.table": "s3://b/_offsets/etl"})
    assert o.ledger_path == "s3://b/_offsets/etl"
    assert o.history_path == "s3://b/_offsets/etl_rebalances"
    assert o.storage_options["aws_secret_access_key"] == "s3cr3t"
    assert "s3cr3t" not in repr(o)


def test_the_environment_counts_like_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CONDITIONAL_PUT", "etag")
    check_commit_safety("s3://b/t", {}, "path")
    monkeypatch.setenv("AWS_CONDITIONAL_PUT", "disabled")
    with pytest.raises(OptionError, match="'disabled'"):
        check_commit_safety("s3://b/t", {}, "path")


def test_unsafe_rename_is_an_explicit_opt_in_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_groups"):
        o = parse_sink_options({**SINK, "storage.aws_s3_allow_unsafe_rename": "true"})
    assert o.storage_options == {"aws_s3_allow_unsafe_rename": "true"}
    safe = parse_sink_options({**SINK, **KEYS, "storage.aws_conditional_put": "etag"})
    assert "s3cr3t" not in repr(safe)
    assert "one writer" in caplog.text
    with pytest.raises(OptionError) as caught:
        parse_sink_options({**SINK, "storage.aws_s3_allow_unsafe_rename": "false"})
    assert caught.value.option == "path"


def test_the_sink_on_s3_needs_a_safe_commit_and_local_paths_do_not() -> None:
    with pytest.raises(OptionError, match="aws_conditional_put=etag"):
        parse_sink_options({**SINK, **KEYS})
    assert parse_sink_options({**SINK, **KEYS, "storage.aws_conditional_put": "etag"})
    assert parse_sink_options({**SINK, "path": "/data/orders"}).path == "/data/orders"
    check_commit_safety("abfss://c@a.dfs.core.windows.net/t", {}, "path")  # not S3: no rule


def test_storage_options_keep_their_names_after_the_prefix() -> None:
    assert storage_options_of({"storage.AWS_REGION": "eu-west-1", "kafka.x": "1"}) == {
        "AWS_REGION": "eu-west-1"
    }


@pytest.mark.parametrize(
    "key",
    [
        "storage.aws_secret_access_key",
        "storage.aws_access_key_id",
        "aws_session_token",
        "storage.azure_storage_account_key",
        "azure_storage_sas_key",
        "azure_client_secret",
        "google_service_account_key",
    ],
)
def test_storage_credentials_are_secrets(key: str) -> None:
    assert is_secret(key)
    assert redact({key: "v"}) == {key: "***"}


@pytest.mark.parametrize(
    "key", ["storage.aws_region", "aws_endpoint_url", "aws_conditional_put", "aws_allow_http"]
)
def test_storage_settings_that_are_not_secrets_are_shown(key: str) -> None:
    assert not is_secret(key)


def test_s3_locations_use_the_storage_options_endpoint_and_keys() -> None:
    args = s3_filesystem_args(
        {
            "AWS_ACCESS_KEY_ID": "AKID",
            "aws_secret_access_key": "s3cr3t",
            "aws_region": "us-east-1",
            "aws_endpoint_url": "http://127.0.0.1:9000",
        }
    )
    assert args == {
        "access_key": "AKID",
        "secret_key": "s3cr3t",
        "region": "us-east-1",
        "scheme": "http",
        "endpoint_override": "127.0.0.1:9000",
    }
    where = location("s3a://bucket/tables/orders/", {"aws_region": "us-east-1"})
    assert where.path == "bucket/tables/orders"
    assert where.fs.type_name == "s3"


def _allocator_env_after(code: str, env: dict[str, str]) -> str:
    """The allocator's variable as a fresh interpreter sees it after running ``code``."""
    import subprocess
    import sys

    from spark_groups.storage.delta import ALLOCATOR_ENV

    done = subprocess.run(
        [sys.executable, "-c", code + f"\nimport os; print(os.environ.get({ALLOCATOR_ENV!r}))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_the_allocator_is_bounded_before_delta_rs_loads_and_never_over_the_users() -> None:
    import os

    from spark_groups.storage.delta import ALLOCATOR_CONF, ALLOCATOR_ENV

    base = {k: v for k, v in os.environ.items() if k != ALLOCATOR_ENV}
    bound = "from spark_groups.storage.delta import bound_allocator; bound_allocator()"
    assert _allocator_env_after(bound, base) == ALLOCATOR_CONF
    # The user's own setting wins.
    assert _allocator_env_after(bound, base | {ALLOCATOR_ENV: "narenas:8"}) == "narenas:8"
    # Once delta-rs is loaded its allocator is configured: setting it then would only mislead.
    assert _allocator_env_after("import deltalake\n" + bound, base) == "None"
