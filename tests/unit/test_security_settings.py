"""Security settings reach librdkafka; their secret values never reach errors or logs."""

from __future__ import annotations

import logging
import time

import pytest

from spark_groups.errors import AuthenticationError, BrokerUnreachableError, SparkGroupsError
from spark_groups.group.member import GroupMember
from spark_groups.options import parse_options

SECRET = "pa55-never-show-7f3a"


def source_options(servers: str, **kafka: str) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": servers, "subscribe": "orders", "group.id": "sec"}
    opts.update({f"kafka.{k.replace('__', '.')}": v for k, v in kafka.items()})
    return opts


def test_security_settings_pass_through_to_member_and_readers() -> None:
    o = parse_options(
        source_options(
            "broker:9093",
            security__protocol="SASL_SSL",
            sasl__mechanism="SCRAM-SHA-512",
            sasl__username="etl",
            sasl__password=SECRET,
            ssl__ca__location="/etc/ca.pem",
            ssl__key__password=SECRET,
        )
    )
    for config in (o.member_config(), o.reader_config()):
        assert config["security.protocol"] == "SASL_SSL"
        assert config["sasl.mechanism"] == "SCRAM-SHA-512"
        assert config["sasl.username"] == "etl"
        assert config["sasl.password"] == SECRET
        assert config["ssl.ca.location"] == "/etc/ca.pem"
        assert config["ssl.key.password"] == SECRET
    assert SECRET not in repr(o)


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"security.protocol": "SSL", "ssl.key.password": SECRET}, BrokerUnreachableError),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "etl",
                "sasl.password": SECRET,
            },
            # Kafka answers the SASL handshake on its plaintext listener with "no mechanisms"
            AuthenticationError,
        ),
    ],
    ids=["ssl", "sasl"],
)
def test_security_protocol_is_applied_and_the_failure_hides_the_secret(
    bootstrap_servers: str,
    settings: dict[str, str],
    error: type[SparkGroupsError],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The test broker's listener speaks PLAINTEXT only: a member told to use SSL or SASL
    cannot talk to it (so the setting reached librdkafka), and fails with a bounded, typed
    error that names the servers but not the secret."""
    caplog.set_level(logging.DEBUG, logger="spark_groups")
    o = parse_options(
        source_options(bootstrap_servers, **{k.replace(".", "__"): v for k, v in settings.items()})
    )
    member = GroupMember(o.member_config(), ["orders"], broker_timeout_s=4)
    started = time.monotonic()
    try:
        with pytest.raises(error) as info:
            member.start()
    finally:
        member.close()
    assert time.monotonic() - started < 30
    assert bootstrap_servers in str(info.value)
    assert SECRET not in str(info.value)
    assert SECRET not in caplog.text
