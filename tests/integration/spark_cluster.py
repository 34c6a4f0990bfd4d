"""A throw-away Spark standalone cluster on loopback: one master and two workers.

The processes are pyspark's own (``bin/spark-class`` of the pip package): the master
(``org.apache.spark.deploy.master.Master``) and workers
(``org.apache.spark.deploy.worker.Worker``) with one core and 1 GB each, on free ports, each
with its own work directory in a temporary folder. :meth:`SparkCluster.start` waits until
both workers are registered with the master (its JSON at ``http://127.0.0.1:WEBUI/json/``);
:meth:`SparkCluster.stop` ends them and removes the folder. Like the tests' Kafka broker and
S3 server, the processes die with the thread that started them (``PR_SET_PDEATHSIG``), so a
test run killed from outside leaves no cluster behind.

    with SparkCluster() as cluster:
        spark-submit --master cluster.master_url ...
        cluster.applications()        # the master's view: apps, their executors' workers
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from spark_groups.tools.kafka_broker import _die_with_parent, _free_ports

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"


class SparkCluster:
    """A standalone master and ``workers`` workers on 127.0.0.1 (a context manager).

    ``worker_memory`` is what each worker offers to executors; ``daemon_memory`` the heap of
    the master and worker JVMs themselves.
    """

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        start_timeout_s: float = 120.0,
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.start_timeout_s = start_timeout_s
        self.port, self.webui_port = _free_ports(2)
        self.dir: Path | None = None
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``, for ``--master``."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui(self) -> str:
        """The master's web UI (its JSON is at ``/json/``)."""
        return f"http://127.0.0.1:{self.webui_port}"

    def worker_dir(self, index: int) -> Path:
        """The work directory of worker ``index`` (its executors' stdout/stderr, app files)."""
        assert self.dir is not None, "the cluster was never started"
        return self.dir / f"worker-{index}"

    def state(self) -> dict[str, Any]:
        """The master's JSON: ``workers``, ``activeapps``, ``completedapps``..."""
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master has registered and sees alive."""
        try:
            workers = self.state().get("workers", [])
        except OSError:
            return []
        return [w for w in workers if w.get("state") == "ALIVE"]

    def _env(self) -> dict[str, str]:
        return dict(
            os.environ,
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_LOG_DIR=str(self.dir),
            SPARK_NO_DAEMONIZE="1",
        )

    def _spawn(self, name: str, args: list[str]) -> None:
        assert self.dir is not None
        out = (self.dir / f"{name}.log").open("ab")
        self._processes.append(
            subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.dir,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        )
        out.close()

    def start(self) -> SparkCluster:
        """Start the master and the workers; return once every worker is registered."""
        self.dir = Path(tempfile.mkdtemp(prefix="spark-groups-cluster-"))
        host = ["--host", "127.0.0.1"]
        self._spawn("master", [_MASTER, *host, "--port", str(self.port),
                               "--webui-port", str(self.webui_port)])  # fmt: skip
        for i in range(self.workers):
            work = self.worker_dir(i)
            work.mkdir()
            port, webui = _free_ports(2)
            self._spawn(
                f"worker-{i}",
                [_WORKER, *host, "--port", str(port), "--webui-port", str(webui),
                 "--cores", str(self.cores), "--memory", self.worker_memory,
                 "--work-dir", str(work), self.master_url],
            )  # fmt: skip
        try:
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while len(self.alive_workers()) < self.workers:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"a Spark daemon exited with {process.returncode} at start; see the "
                        f"logs in {self.dir}: {self.logs()[-3000:]}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(self.alive_workers())} of {self.workers} workers registered with "
                    f"{self.master_url} within {self.start_timeout_s:.0f} s; logs: "
                    f"{self.logs()[-3000:]}"
                )
            time.sleep(0.5)

    def logs(self) -> str:
        """The daemons' logs, for failure messages."""
        if self.dir is None:
            return ""
        return "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')}" for p in sorted(self.dir.glob("*.log"))
        )

    def stop(self) -> None:
        """End the workers (and their executors) and the master; remove the folder."""
        processes, self._processes = self._processes, []
        for process in reversed(processes):  # workers first, then the master
            if process.poll() is None:  # its group: the daemon and the executors it runs
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        folder, self.dir = self.dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
