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
        cluster.state()               # the master's view (its JSON): workers, apps
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Self

import pyspark

from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports, stop_all

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"


class SparkCluster(Launcher):
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
        self.port, self.webui_port = free_ports(2)
        self.dir: Path | None = None
        self._processes: list[ManagedProcess] = []  # the master first

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
        except (OSError, ValueError):  # not up yet; or, while starting, the UI's HTML page
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
        # Detached: its group is the daemon and the executors it runs.
        process = ManagedProcess(f"the Spark {name}")
        process.start(
            [str(SPARK_CLASS), *args], self.dir / f"{name}.log", env=self._env(), cwd=self.dir
        )
        self._processes.append(process)

    def start(self) -> Self:
        """Start the master and the workers; return once every worker is registered. If they
        do not come up, stop them and raise RuntimeError with the end of their logs."""
        self.dir = Path(tempfile.mkdtemp(prefix="spark-groups-cluster-"))
        host = ["--host", "127.0.0.1"]
        self._spawn("master", [_MASTER, *host, "--port", str(self.port),
                               "--webui-port", str(self.webui_port)])  # fmt: skip
        for i in range(self.workers):
            work = self.worker_dir(i)
            work.mkdir()
            port, webui = free_ports(2)
            self._spawn(
                f"worker-{i}",
                [_WORKER, *host, "--port", str(port), "--webui-port", str(webui),
                 "--cores", str(self.cores), "--memory", self.worker_memory,
                 "--work-dir", str(work), self.master_url],
            )  # fmt: skip
        master, *workers = self._processes
        try:
            master.wait_until_ready(
                lambda: len(self.alive_workers()) >= self.workers,
                timeout_s=self.start_timeout_s,
                what=f"see {self.workers} workers alive",
                poll_s=0.5,
                others=workers,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End the workers (and their executors) and the master; remove the folder."""
        processes, self._processes = self._processes, []
        stop_all(processes[::-1], grace_s=30)  # workers first, then the master
        folder, self.dir = self.dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
