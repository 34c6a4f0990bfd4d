"""A throw-away Spark Connect server on loopback, for tests that drive Spark through a Connect
client (as Databricks serverless and shared clusters run notebooks).

The server is pyspark's own (``bin/spark-submit`` of the pip package running the tests, whose
``jars/`` carry ``spark-connect_2.13-<version>.jar``): ``SparkConnectServer`` with
``local[2]``, 1 GB of driver memory and no UI, listening on a free port of 127.0.0.1. Its
Python workers run this interpreter (``PYSPARK_PYTHON``), so they import the same
``spark_groups`` the client registers. :meth:`ConnectServer.start` returns once a Connect
client got an answer from it; :meth:`ConnectServer.stop` ends it (its Python workers too) and
removes its folder. Its log (``server.log``: Spark's and the Python workers' output) is in
that folder; :meth:`ConnectServer.log_tail` shows its end in failure messages. Like the tests'
Kafka broker and Spark cluster, it dies with the thread that started it
(``PR_SET_PDEATHSIG``).

    with ConnectServer() as server:
        spark = SparkSession.builder.remote(server.url).getOrCreate()
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Self

import pyspark

from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports, port_open

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"

_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"

#: Spark's warnings and errors only (its INFO lines would bury the Python workers' output).
_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""

#: What would make the server's Python workers (or spark-submit) act as a Connect client:
#: a Connect client in the test process sets the first.
_CLIENT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE")


class ConnectServer(Launcher):
    """One Spark Connect server (``local[2]``) on 127.0.0.1; a context manager.

    ``conf`` adds Spark settings (``--conf``); ``python`` is the interpreter of its Python
    workers (the test's, by default).
    """

    def __init__(
        self,
        *,
        master: str = "local[2]",
        driver_memory: str = "1g",
        conf: Mapping[str, str] | None = None,
        python: str = sys.executable,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.master = master
        self.driver_memory = driver_memory
        self.conf = dict(conf or {})
        self.python = python
        self.start_timeout_s = start_timeout_s
        (self.port,) = free_ports(1)
        self.dir: Path | None = None
        # Detached: its group is spark-submit, the JVM and its Python workers.
        self._process = ManagedProcess("the Spark Connect server")

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:PORT``, for ``SparkSession.builder.remote(...)``."""
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log: spark-submit's stdout and stderr."""
        if self.dir is None:
            raise RuntimeError("the Connect server was never started")
        return self.dir / "server.log"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process.running

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log, for failure messages."""
        return self._process.log_tail(chars)

    def _command(self) -> list[str]:
        assert self.dir is not None
        conf = {
            "spark.ui.enabled": "false",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.port.maxRetries": "0",  # another port would not be self.url
            "spark.driver.host": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.warehouse.dir": str(self.dir / "warehouse"),
            "spark.driver.extraJavaOptions": (
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'} "
                f"-Dderby.system.home={self.dir}"
            ),
            **self.conf,
        }
        args = [str(SPARK_SUBMIT), "--class", _SERVER, "--name", "spark-groups-connect-tests"]
        args += ["--master", self.master, "--driver-memory", self.driver_memory]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        return [*args, "spark-internal"]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _CLIENT_ENV}
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_CONNECT_MODE="0",  # what sbin/start-connect-server.sh sets
            PYSPARK_PYTHON=self.python,
            PYSPARK_DRIVER_PYTHON=self.python,
        )
        return env

    def start(self) -> Self:
        """Start the server; return once a Connect client gets an answer from it. If it
        does not come up, the error ends with its log, and its folder stays."""
        if self.running:
            return self
        self.dir = Path(tempfile.mkdtemp(prefix="spark-groups-connect-"))
        (self.dir / "log4j2.properties").write_text(_LOG4J2)
        self._process.start(self._command(), self.log_path, env=self._env(), cwd=self.dir)
        try:
            self._process.wait_until_ready(
                self._answers, timeout_s=self.start_timeout_s, what=f"answer on {self.url}"
            )
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def _answers(self) -> bool:
        """Whether the server answers one query from a Connect session of its own, stopped
        after (so the test's ``builder.remote(...).getOrCreate()`` makes a fresh one). False
        while nothing listens on its port; once something does, one query decides."""
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        if not port_open(self.port):
            return False
        try:
            session = ConnectSession.builder.remote(self.url).create()
            try:
                rows = session.range(3).collect()
                assert [r.id for r in rows] == [0, 1, 2], rows
            finally:
                session.stop()
        except Exception as exc:
            raise self._process.failure(f"on {self.url} did not answer a client: {exc}") from exc
        return True

    def stop(self, remove: bool = True) -> None:
        """End the server and its Python workers; remove its folder (and log) with
        ``remove``."""
        self._process.stop(grace_s=30)  # and the Python workers left behind by the JVM
        folder = self.dir
        if remove and folder is not None:
            self.dir = None
            shutil.rmtree(folder, ignore_errors=True)
