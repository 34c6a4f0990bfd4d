"""Shared fixtures: one broker per test session.

The broker is Apache Kafka (KRaft, from the jars of ``bash jars/fetch kafka``) unless
``SPARK_GROUPS_TEST_BROKER=tansu`` picks the embedded Tansu broker, or ``BOOTSTRAP_SERVERS``
points the tests at a cluster of your own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_groups.embedded import EmbeddedBroker
from spark_groups.tools.kafka_broker import KafkaBroker
from spark_groups.tools.s3_server import S3Server

import installed_package
from support.broker import TEST_BROKER, broker_kind, create_topic


def pytest_configure(config: pytest.Config) -> None:
    """In the lanes of ``.ci/run`` (``SPARK_GROUPS_TEST_INSTALLED=1``), refuse to run tests
    of anything but the installed wheel (:mod:`installed_package`)."""
    if os.environ.get(installed_package.INSTALLED_ENV):
        found = installed_package.problems()
        if found:
            raise pytest.UsageError("; ".join(found))


#: The tests that start member processes (each its own Spark application or several) or a
#: Spark cluster: each keeps the machine's two cores busy for a minute or more. Marked
#: ``heavy``: `.ci/run` runs them one after another (``-m heavy``), beside the other tests
#: (``-m "not heavy"``, mostly waiting on the broker); two heavy tests side by side slowed
#: each other past their deadlines (README, "What `bash .ci/run` costs").
HEAVY = (
    "tests/chaos/",
    "tests/crash/",
    "tests/integration/test_bench_smoke.py",  # the bench harness: simulated member processes
    "tests/integration/test_cluster.py",
    "tests/integration/test_member_kill.py",
    "tests/integration/test_mixed_group.py",
    "tests/integration/test_rolling_deploy.py",
    "tests/integration/test_sink_maintenance_s3.py",
    "tests/integration/test_sink.py::test_two_member_processes_one_killed_mid_batch",
    # One to three spark-pipelines runs a test (each a Spark Connect server and its workers);
    # their fixed port (15002) also wants them one at a time.
    "tests/integration/test_pipelines.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`HEAVY` ``heavy``."""
    for item in items:
        if item.nodeid.startswith(HEAVY):
            item.add_marker(pytest.mark.heavy)


@pytest.fixture(scope="session")
def bootstrap_servers() -> Iterator[str]:
    """A broker for the whole test run: ``$BOOTSTRAP_SERVERS``, Apache Kafka, or Tansu."""
    existing = os.environ.get("BOOTSTRAP_SERVERS")
    if existing:
        yield existing
        return
    if TEST_BROKER == "tansu":
        with EmbeddedBroker() as embedded:
            yield embedded.bootstrap_servers
        return
    if TEST_BROKER != "kafka":
        raise pytest.UsageError(f"SPARK_GROUPS_TEST_BROKER must be kafka or tansu: {TEST_BROKER}")
    with KafkaBroker() as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def tansu_servers(bootstrap_servers: str) -> Iterator[str]:
    """The embedded Tansu broker, for tests of its quirks: the session's broker when that is
    Tansu, else one started for them."""
    if broker_kind() == "tansu":
        yield bootstrap_servers
        return
    with EmbeddedBroker() as embedded:
        yield embedded.bootstrap_servers


@pytest.fixture
def make_topic(bootstrap_servers: str):
    """Create a fresh, uniquely named topic: ``make_topic(partitions=3) -> name``."""

    def create(partitions: int = 3, prefix: str = "t") -> str:
        return create_topic(bootstrap_servers, partitions, prefix)

    return create


def _native_or_skip() -> None:
    """Skip the test where the native read path's C extension is not built (or cannot load)
    and the environment does not require it; with ``SPARK_GROUPS_READ_PATH=native`` fail it
    instead. (CI checks that the extension loads before the suite, so none is skipped there.)"""
    from spark_groups.read import native

    if not native.available():
        if os.environ.get(native.READ_PATH_ENV, "").strip().lower() == "native":
            pytest.fail(f"{native.READ_PATH_ENV}=native, but {native.load_error()}")
        pytest.skip(f"native read path not available: {native.load_error()}")


@pytest.fixture(params=["python", "native"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test on each executor read path (``SPARK_GROUPS_READ_PATH`` set for its
    duration). The native case is skipped only where the C extension is not built (or cannot
    load) and the environment does not require it: with ``SPARK_GROUPS_READ_PATH=native`` it
    runs, and fails if the native path cannot. A task read on the other path fails the test."""
    from spark_groups.read import native, reader

    path = request.param
    if path == "native":
        _native_or_skip()
    monkeypatch.setenv(native.READ_PATH_ENV, path)
    other = "native" if path == "python" else "python"
    before = reader.TASKS_BY_PATH[other]
    yield path
    assert reader.TASKS_BY_PATH[other] == before, f"a task was read on the {other} path"


@pytest.fixture
def native_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test that names its read paths itself (``read_path=...``): the native path must
    be there (skipped or failed as for :func:`read_path`), and ``SPARK_GROUPS_READ_PATH`` is
    unset for the test's duration."""
    from spark_groups.read import native

    _native_or_skip()
    monkeypatch.delenv(native.READ_PATH_ENV, raising=False)


@pytest.fixture(scope="session")
def mock_servers() -> Iterator[str]:
    """librdkafka's mock cluster (Kafka semantics); lives as long as its producer."""
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = owner.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    owner.flush(5)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible server (S3Proxy, from ``bash jars/fetch s3proxy``) for the whole
    test run, on a loopback port, with random credentials and conditional writes."""
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A fresh bucket on the session's S3 server: its URI, ``s3://NAME``."""
    import uuid

    return s3_server.create_bucket(f"t{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def azure_server() -> Iterator[Any]:
    """A real Azure Blob Storage server (Azurite, from ``bash jars/fetch azurite``) for the
    whole test run, on a loopback port, with the emulator's account."""
    from support.azure import Azurite

    with Azurite() as server:
        yield server


@pytest.fixture
def azure_container(azure_server: Any) -> str:
    """A fresh container on the session's Azure server: its URI, ``az://NAME``."""
    return f"az://{azure_server.container()}"


@pytest.fixture
def streams() -> Iterator[list]:
    """The ``GroupStream``s a test makes (append them): each stops (commits what it can and
    leaves its group) when the test ends."""
    made: list = []
    yield made
    for s in made:
        s.stop()
