"""A throw-away single-node Apache Kafka (KRaft) for tests, benchmarks and local runs.

The real thing, unlike the embedded Tansu broker: generation fencing, static membership,
KIP-848 and a correct ListOffsets. It runs ``kafka.Kafka`` from the jars of ``bash jars/fetch
kafka`` as one combined broker and controller on free loopback ports, its log in a temporary
folder :meth:`KafkaBroker.stop` removes. With ``sasl_users`` it also opens a
``SASL_PLAINTEXT`` listener (PLAIN) and turns on the ACL authorizer; the plaintext listener
stays open to everything, for setting ACLs and the tests' own producers. docs/brokers.md.

    with KafkaBroker() as broker:
        servers = broker.bootstrap_servers
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

from spark_groups.errors import BrokerUnreachableError, SparkGroupsError
from spark_groups.kafka.logs import with_logger
from spark_groups.tools.checkout import jars_root
from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports, java, port_open

log = logging.getLogger(__name__)

#: The command that fetches the jars; named by every error about missing jars.
FETCH_COMMAND = "bash jars/fetch kafka"

#: Group timing fit for tests: joins complete at once, sessions end in seconds. The KIP-848
#: (``group.protocol=consumer``) session and heartbeat are the broker's, so they are set here.
_SERVER_DEFAULTS: dict[str, str] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # Share groups' tests set a lock of seconds per group (Kafka's minimum: 15 s).
    "group.share.min.record.lock.duration.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "500",
    "log.flush.interval.messages": "9223372036854775807",
    "log.segment.bytes": str(64 * 1024 * 1024),
    "num.network.threads": "2",
    "num.io.threads": "4",
}

#: The broker's log goes to its stdout, which goes to server.log with the JVM's own output.
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = warn
"""

#: Kafka's command-line tools: warnings and errors to stderr, nothing else.
_LOG4J2_TOOLS = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""


def kafka_jars_dir() -> Path:
    """Where the Kafka jars are: ``$SPARK_GROUPS_KAFKA_JARS``, else ``kafka`` under
    :func:`~spark_groups.tools.checkout.jars_root`."""
    configured = os.environ.get("SPARK_GROUPS_KAFKA_JARS")
    if configured:
        return Path(configured)
    return jars_root() / "kafka"


def _classpath() -> str:
    jars = kafka_jars_dir()
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise SparkGroupsError(
            f"no Apache Kafka jars in {jars}: fetch them with `{FETCH_COMMAND}` from the "
            "project's checkout (or set SPARK_GROUPS_KAFKA_JARS to a folder that has them)"
        )
    return f"{jars}/*"


class KafkaBroker(Launcher):
    """One Apache Kafka node (broker and KRaft controller) on 127.0.0.1; a context manager.

    ``restart()`` keeps the log (unlike Tansu, Kafka's storage is on disk), so a test can show
    what survives a broker restart. ``stop()`` ends the process and deletes the log folder.
    """

    def __init__(
        self,
        *,
        sasl_users: Mapping[str, str] | None = None,
        server_properties: Mapping[str, str] | None = None,
        heap: str = "512m",
        start_timeout_s: float = 60.0,
    ) -> None:
        self.sasl_users = dict(sasl_users or {})
        for name, password in self.sasl_users.items():
            # They go into a JAAS line as user_<name>="<password>".
            if (
                not name
                or any(c in name for c in ' \t\n"=;\\')
                or any(c in password for c in '"\\\n')
            ):
                raise SparkGroupsError(
                    f"sasl_users: user {name!r} has a name with blanks, quotes, '=' or ';', "
                    "or a password with quotes, backslashes or line breaks"
                )
        self.heap = heap
        self.start_timeout_s = start_timeout_s
        self.port, self.controller_port, self.sasl_port = free_ports(3)
        self._overrides = dict(server_properties or {})
        self._dir: Path | None = None
        self._cluster_id = _cluster_id()
        self._process = ManagedProcess("Apache Kafka", error=BrokerUnreachableError)

    @property
    def bootstrap_servers(self) -> str:
        """The plaintext listener, for ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listener (only with ``sasl_users``)."""
        if not self.sasl_users:
            raise SparkGroupsError("this broker was started without sasl_users")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def log_path(self) -> Path:
        """The broker's own log (server.log in its folder), with the JVM's output."""
        if self._dir is None:
            raise SparkGroupsError("the broker has not been started")
        return self._dir / "server.log"

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process.running

    def _properties(self, data_dir: Path) -> dict[str, str]:
        listeners = [f"PLAINTEXT://127.0.0.1:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(data_dir),
            **_SERVER_DEFAULTS,
        }
        if self.sasl_users:
            listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}")
            protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
            users = " ".join(f'user_{name}="{pw}"' for name, pw in self.sasl_users.items())
            props.update(
                {
                    "sasl.enabled.mechanisms": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                        f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                    ),
                    "authorizer.class.name": (
                        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                    ),
                    # The plaintext and controller listeners authenticate as ANONYMOUS.
                    "super.users": "User:ANONYMOUS",
                    "allow.everyone.if.no.acl.found": "false",
                }
            )
        listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        props["listeners"] = ",".join(listeners)
        props["advertised.listeners"] = ",".join(
            x for x in listeners if not x.startswith("CONTROLLER")
        )
        props["listener.security.protocol.map"] = ",".join(protocols)
        props.update(self._overrides)
        return props

    def _java_command(self, main: str, *args: str) -> list[str]:
        assert self._dir is not None
        return [
            java(),
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1",  # the C1 compiler alone: faster start, less memory
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
            "-cp",
            _classpath(),
            main,
            *args,
        ]

    def start(self) -> Self:
        """Format storage (first start only), start the node and wait until it serves; if it
        does not, stop it (deleting its folder) and raise :class:`BrokerUnreachableError`
        with the end of its log."""
        if self.running:
            return self
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="spark-groups-kafka-"))
            props = self._properties(self._dir / "data")
            self._config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            (self._dir / "log4j2.properties").write_text(_LOG4J2.format(level="INFO"))
        if not (self._dir / "data" / "meta.properties").exists():
            self._format()
        self._process.start(
            self._java_command("kafka.Kafka", str(self._config_path)), self.log_path
        )
        try:
            self._process.wait_until_ready(
                self._serving(),
                timeout_s=self.start_timeout_s,
                what=f"serve on {self.bootstrap_servers}",
            )
        except BaseException:
            self.stop()
            raise
        log.info("Apache Kafka listening on %s (log %s)", self.bootstrap_servers, self.log_path)
        return self

    @property
    def _config_path(self) -> Path:
        assert self._dir is not None
        return self._dir / "server.properties"

    def _format(self) -> None:
        formatted = subprocess.run(
            self._java_command(
                "kafka.tools.StorageTool",
                "format",
                # One argument: a random id may start with "-", which argparse would take
                # for an option ("expected one argument").
                f"--cluster-id={self._cluster_id}",
                "-c",
                str(self._config_path),
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if formatted.returncode != 0:
            raise SparkGroupsError(
                "formatting Kafka's storage failed: "
                f"{(formatted.stderr or formatted.stdout).strip()[-2000:]}"
            )

    def _serving(self) -> Callable[[], bool]:
        """Whether the node answers a metadata request with itself as a broker."""
        from spark_groups.kafka.client import AdminClient

        admin: AdminClient | None = None  # made after the first connect: it would log refusals

        def serving() -> bool:
            nonlocal admin
            if not port_open(self.port):
                return False
            try:
                admin = admin or AdminClient(
                    with_logger({"bootstrap.servers": self.bootstrap_servers})
                )
                return bool(admin.list_topics(timeout=1).brokers)
            except Exception:
                return False

        return serving

    def restart(self, down_s: float = 0.0, *, lose_data: bool = False) -> None:
        """Stop the node and start it again on the same ports, with the same log; with
        ``lose_data``, with its storage wiped (a broker that came back with an empty disk:
        every topic, offset and group gone)."""
        self._process.stop(grace_s=30)  # SIGTERM: a controlled shutdown, the log consistent
        if lose_data and self._dir is not None:
            shutil.rmtree(self._dir / "data", ignore_errors=True)
        deadline = time.monotonic() + down_s
        while time.monotonic() < deadline:
            time.sleep(0.05)
        self.start()

    def freeze(self) -> None:
        """SIGSTOP the broker: it stops answering without closing connections."""
        self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen broker."""
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the node and delete its folder (log, storage, configuration)."""
        self.thaw()
        self._process.stop(grace_s=20)
        folder, self._dir = self._dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            log.info("Apache Kafka on %s stopped", self.bootstrap_servers)


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def run_kafka_tool(main: str, args: Sequence[str], timeout_s: float = 120.0) -> str:
    """Run one of Kafka's command-line tools by its main class, from the same jars, e.g.
    ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand`` (``kafka-consumer-groups``);
    returns its standard output. Raises :class:`SparkGroupsError` when it exits non-zero."""
    with tempfile.NamedTemporaryFile("w", suffix=".properties", prefix="log4j2-tools-") as conf:
        conf.write(_LOG4J2_TOOLS)
        conf.flush()
        done = subprocess.run(
            [
                java(),
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={conf.name}",
                "-cp",
                _classpath(),
                main,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    if done.returncode != 0:
        raise SparkGroupsError(f"{main} exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout
