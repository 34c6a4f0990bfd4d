"""SASL (PLAIN) and ACLs on a real Apache Kafka: a member with the right credentials and ACLs
works; a wrong password, a missing READ on the topic and a missing READ on the group each fail
promptly with a typed error naming what was refused; the password shows up nowhere.

One broker for the module: ``KafkaBroker(sasl_users=...)``, whose SASL_PLAINTEXT listener
authenticates ``alice`` and whose StandardAuthorizer denies what no ACL allows. The test
sets ACLs through its plaintext listener (a super user) with confluent-kafka's AdminClient,
as an operator would, and produces through it too.

Where each failure shows up (see ``spark_groups.kafka.auth``): a wrong password in the driver's
member at start (librdkafka's error callback, ~1 s); no ACL on the topic in the member's
first metadata request; DESCRIBE but no READ on the topic in the executors' first fetch; no
ACL on the group in the member's first poll after subscribing (FindCoordinator).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from test_security import run_and_search

from spark_groups.errors import AuthenticationError, AuthorizationError, SparkGroupsError
from spark_groups.group.member import GroupMember
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.read.reader import close_cached_consumers, read_range
from spark_groups.tools.kafka_broker import KafkaBroker

from support.broker import committed_offsets, create_topic, produce_ids, unique
from support.options import group_options
from support.spark import ids_source, run_into_sink
from support.tables import table_ids

ALICE_PASSWORD = "alice-pw-7Qx9-never-shown"
ADMIN_PASSWORD = "admin-pw-3Kd2-never-shown"
WRONG_PASSWORD = "wrong-pw-5Zt8-never-shown"
PASSWORDS = (ALICE_PASSWORD, ADMIN_PASSWORD, WRONG_PASSWORD)

#: ACL operations a consumer needs: READ on its topic (implies DESCRIBE) and on its group.
TOPIC_READ = (ResourceType.TOPIC, AclOperation.READ)
TOPIC_DESCRIBE = (ResourceType.TOPIC, AclOperation.DESCRIBE)
GROUP_READ = (ResourceType.GROUP, AclOperation.READ)


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaBroker]:
    """Apache Kafka with a SASL_PLAINTEXT listener and ACLs enforced, for this module."""
    with KafkaBroker(sasl_users={"admin": ADMIN_PASSWORD, "alice": ALICE_PASSWORD}) as kafka:
        yield kafka


def allow(broker: KafkaBroker, user: str, *grants: tuple[ResourceType, AclOperation, str]) -> None:
    """Add ALLOW ACLs for ``User:<user>`` (each grant: resource type, operation, name)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    bindings = [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for kind, op, name in grants
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def sasl_settings(user: str, password: str) -> dict[str, str]:
    """librdkafka settings for the SASL listener (without the ``kafka.`` prefix)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def source_options(
    broker: KafkaBroker, topic: str, group: str, password: str, ledger: str | None = None
) -> dict[str, str]:
    sasl = {f"kafka.{k}": v for k, v in sasl_settings("alice", password).items()}
    return group_options(broker.sasl_bootstrap_servers, topic, group, ledger, **sasl)


def setup(broker: KafkaBroker, *grants: tuple[ResourceType, AclOperation]) -> tuple[str, str]:
    """A fresh 2-partition topic with 40 records and a group name; ``grants`` for alice."""
    topic, group = create_topic(broker.bootstrap_servers, 2, "acl"), unique("acl")
    produce_ids(broker.bootstrap_servers, topic, range(40), 2)
    names = {ResourceType.TOPIC: topic, ResourceType.GROUP: group}
    if grants:
        allow(broker, "alice", *[(kind, op, names[kind]) for kind, op in grants])
    return topic, group


def member(broker: KafkaBroker, topic: str, group: str, password: str) -> GroupMember:
    config = {
        "bootstrap.servers": broker.sasl_bootstrap_servers,
        "group.id": group,
        "enable.auto.commit": "false",
        **sasl_settings("alice", password),
    }
    return GroupMember(config, [topic], broker_timeout_s=30)


def member_error(broker: KafkaBroker, topic: str, group: str, password: str) -> tuple[Any, float]:
    """Start a member, wait for its assignment; the error it fails with and how long it took."""
    m = member(broker, topic, group, password)
    started = time.monotonic()
    try:
        with pytest.raises(SparkGroupsError) as info:
            m.start()
            m.wait_for_assignment(30)
            m.committed([TopicPartition(topic, 0)])
            m.commit({TopicPartition(topic, 0): 1})
    finally:
        m.close()
    return info.value, time.monotonic() - started


def query_error(spark: Any, opts: dict, tmp_path: Path) -> tuple[str, float]:
    """Run a Trigger.AvailableNow query that must fail; its error text and how long it took."""
    started = time.monotonic()
    error = run_into_sink(
        spark, ids_source(spark, opts), tmp_path / "table", tmp_path / "cp", opts["group.id"]
    )
    assert error is not None, "the query did not fail"
    return str(error), time.monotonic() - started


def assert_no_password(*texts: str) -> None:
    for text in texts:
        for password in PASSWORDS:
            assert password not in text


# --------------------------------------------------------------------------- it works


def test_a_member_with_credentials_and_acls_reads_and_commits(
    spark: Any, broker: KafkaBroker, tmp_path: Path
) -> None:
    """READ on the topic and on the group is all a query needs: the executors' assign-only
    readers (their own ``group.id``, which has no ACL) read every record, and the batch is
    committed to Kafka and to the ledger, and written once into the delta-group table."""
    topic, group = setup(broker, TOPIC_READ, TOPIC_DESCRIBE, GROUP_READ)
    ledger = str(tmp_path / "ledger")
    opts = source_options(broker, topic, group, ALICE_PASSWORD, ledger)
    error = run_into_sink(
        spark, ids_source(spark, opts), tmp_path / "table", tmp_path / "cp", group
    )
    assert error is None, str(error)
    assert sorted(table_ids(tmp_path / "table")) == list(range(40))

    tps = [TopicPartition(topic, p) for p in (0, 1)]
    assert OffsetLedger(ledger, group).latest_positions(tps) == {tp: 20 for tp in tps}
    assert committed_offsets(broker.bootstrap_servers, group, topic, 2) == {0: 20, 1: 20}


def test_readers_need_no_acl_on_any_group(broker: KafkaBroker, read_path: str) -> None:
    """librdkafka looks up the coordinator of an assign-only consumer's group.id too and
    reports GROUP_AUTHORIZATION_FAILED; the executors' readers and the end-offset resolver
    (``endOffsets=fetch`` polls) never use that group, so they ignore it and work with READ
    on the topic alone."""
    topic, _ = setup(broker, TOPIC_READ)
    config = {
        "bootstrap.servers": broker.sasl_bootstrap_servers,
        "group.id": unique("no-acl"),
        **sasl_settings("alice", ALICE_PASSWORD),
    }
    try:
        batches = list(read_range(config, OffsetRange(topic, 0, 0, 20), include_headers=False))
    finally:
        close_cached_consumers()
    assert sum(b.num_rows for b in batches) == 20
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    with EndOffsetResolver(config, mode="fetch", timeout_s=10) as resolver:
        assert resolver.end_offsets(tps) == {tp: 20 for tp in tps}


# --------------------------------------------------------------------------- wrong password


def test_a_wrong_password_is_an_authentication_error(
    broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="spark_groups")
    topic, group = setup(broker, TOPIC_READ, GROUP_READ)
    error, took = member_error(broker, topic, group, WRONG_PASSWORD)
    assert isinstance(error, AuthenticationError)
    assert (error.username, error.mechanism) == ("alice", "PLAIN")
    assert error.servers == broker.sasl_bootstrap_servers
    text = str(error)
    assert "authentication failed for user 'alice'" in text
    assert broker.sasl_bootstrap_servers in text
    assert "kafka.sasl.password" in text  # what to check
    assert took < 10, f"took {took:.1f} s (brokerTimeoutMs is 30 s)"
    assert_no_password(text, repr(vars(error)), caplog.text)


def test_a_wrong_password_fails_a_reader_at_once(broker: KafkaBroker, read_path: str) -> None:
    """An executor's reader raises refused credentials from librdkafka's error callback,
    not after the poll timeout."""
    topic, _ = setup(broker, TOPIC_READ)
    config = {
        "bootstrap.servers": broker.sasl_bootstrap_servers,
        **sasl_settings("alice", WRONG_PASSWORD),
    }
    started = time.monotonic()
    try:
        with pytest.raises(AuthenticationError) as info:
            list(read_range(config, OffsetRange(topic, 0, 0, 20), include_headers=False))
    finally:
        close_cached_consumers()
    assert time.monotonic() - started < 10  # not the 120 s poll timeout
    assert info.value.username == "alice"
    assert_no_password(str(info.value))


def test_a_wrong_password_fails_the_query(spark: Any, broker: KafkaBroker, tmp_path: Path) -> None:
    topic, group = setup(broker, TOPIC_READ, GROUP_READ)
    text, took = query_error(spark, source_options(broker, topic, group, WRONG_PASSWORD), tmp_path)
    assert "AuthenticationError" in text
    assert "authentication failed for user 'alice'" in text
    assert took < 60, f"took {took:.1f} s"
    assert_no_password(text)


# --------------------------------------------------------------------------- topic ACLs


def test_no_acl_on_the_topic_is_an_authorization_error_at_start(broker: KafkaBroker) -> None:
    """Without even DESCRIBE, Kafka hides the topic from metadata; asked by name it says
    TOPIC_AUTHORIZATION_FAILED, so the member names the topic instead of 'not found'."""
    topic, group = setup(broker, GROUP_READ)
    error, took = member_error(broker, topic, group, ALICE_PASSWORD)
    assert isinstance(error, AuthorizationError)
    assert (error.resource_type, error.resource, error.operation) == ("topic", topic, "READ")
    assert error.principal == "User:alice"
    assert "--operation READ --topic " + topic in str(error)  # the ACL to add
    assert took < 10
    assert_no_password(str(error))


def test_describe_without_read_on_the_topic_fails_the_first_fetch(
    broker: KafkaBroker, read_path: str
) -> None:
    """DESCRIBE alone lets the member join and list offsets; reading (an executor's fetch)
    and committing are refused."""
    topic, group = setup(broker, TOPIC_DESCRIBE, GROUP_READ)
    config = {
        "bootstrap.servers": broker.sasl_bootstrap_servers,
        **sasl_settings("alice", ALICE_PASSWORD),
    }
    started = time.monotonic()
    try:
        with pytest.raises(AuthorizationError) as info:
            list(read_range(config, OffsetRange(topic, 0, 0, 20), include_headers=False))
    finally:
        close_cached_consumers()
    assert time.monotonic() - started < 10  # not the 120 s poll timeout
    error = info.value
    assert (error.resource_type, error.resource, error.operation) == ("topic", topic, "READ")

    error, _ = member_error(broker, topic, group, ALICE_PASSWORD)  # the commit is refused
    assert isinstance(error, AuthorizationError)
    assert (error.resource_type, error.resource) == ("topic", topic)
    assert_no_password(str(error), str(info.value))


@pytest.mark.parametrize(
    "grants", [(GROUP_READ,), (TOPIC_DESCRIBE, GROUP_READ)], ids=["none", "describe"]
)
def test_a_missing_read_on_the_topic_fails_the_query(
    spark: Any, broker: KafkaBroker, tmp_path: Path, grants: tuple
) -> None:
    """No ACL on the topic fails in the driver at start; DESCRIBE without READ in the
    executors' first fetch. Both name the topic."""
    topic, group = setup(broker, *grants)
    text, took = query_error(spark, source_options(broker, topic, group, ALICE_PASSWORD), tmp_path)
    assert "AuthorizationError" in text
    assert f"may not READ topic '{topic}'" in text
    assert took < 60, f"took {took:.1f} s"
    assert_no_password(text)


# --------------------------------------------------------------------------- group ACL


def test_no_acl_on_the_group_is_an_authorization_error(broker: KafkaBroker) -> None:
    topic, group = setup(broker, TOPIC_READ)
    error, took = member_error(broker, topic, group, ALICE_PASSWORD)
    assert isinstance(error, AuthorizationError)
    assert (error.resource_type, error.resource, error.operation) == ("group", group, "READ")
    assert "--operation READ --group " + group in str(error)
    assert took < 10
    assert_no_password(str(error))


def test_a_missing_read_on_the_group_fails_the_query(
    spark: Any, broker: KafkaBroker, tmp_path: Path
) -> None:
    topic, group = setup(broker, TOPIC_READ)
    text, took = query_error(spark, source_options(broker, topic, group, ALICE_PASSWORD), tmp_path)
    assert "AuthorizationError" in text
    assert f"may not READ group '{group}'" in text
    assert took < 60, f"took {took:.1f} s"
    assert_no_password(text)


# --------------------------------------------------------------------------- secrets


def test_a_sasl_run_writes_the_password_nowhere(broker: KafkaBroker, tmp_path: Path) -> None:
    """test_security.py's search (every file of the run, the CLI's output) with a password
    the broker checks: the run only works because the password reached librdkafka."""
    settings = sasl_settings("alice", ALICE_PASSWORD)

    def grant(topic: str, group: str) -> None:
        allow(broker, "alice", (ResourceType.TOPIC, AclOperation.READ, topic),
              (ResourceType.GROUP, AclOperation.READ, group))  # fmt: skip

    run_and_search(
        tmp_path,
        producer_servers=broker.bootstrap_servers,
        member_servers=broker.sasl_bootstrap_servers,
        source_options={f"kafka.{k}": v for k, v in settings.items()},
        cli_settings=[f"{k}={v}" for k, v in settings.items()],
        secret=ALICE_PASSWORD,
        grant=grant,
    )
