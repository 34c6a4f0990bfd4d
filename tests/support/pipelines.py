"""The example pipeline (``jobs/pipeline``) in a test's folder, run with the real
``spark-pipelines`` CLI of the running pyspark (Spark 4.1+), and what it wrote.

:class:`PipelineRun` copies the example into the folder, with its work directory (catalog,
checkpoints, tables, ledgers: ``/tmp/spark-groups-pipeline`` in the example) moved there, and
runs it as a user does: ``SPARK_CONF_DIR=<project>/conf spark-pipelines run --spec ...``, on
the launcher (:class:`~support.launch.MemberProcess`: a session of its own, a log per run).
The CLI's local Spark Connect server binds port 15002 (pyspark starts it there), so one
pipeline runs at a time on a machine: a run holds a lock file (:data:`PORT_LOCK`) that every
test process takes, the heavy tests' and the compatibility lanes' beside them.
"""

from __future__ import annotations

import fcntl
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pyarrow.dataset as pads
from deltalake import DeltaTable

from support.launch import ROOT, MemberProcess

#: The example, as users copy it.
EXAMPLE = ROOT / "jobs" / "pipeline"
#: The example's work directory, replaced in every file of the copy.
EXAMPLE_WORK = "/tmp/spark-groups-pipeline"
#: The port the CLI's local Spark Connect server binds.
CONNECT_PORT = 15002
#: The file a pipeline run holds locked: one run at a time on the machine.
PORT_LOCK = Path(tempfile.gettempdir()) / f"spark-groups-connect-{CONNECT_PORT}.lock"
#: How long a run's Connect server may take to free the port once the CLI has ended.
PORT_FREED_S = 60.0
#: The last line of a run that ended well (a failed run prints no "Run is ..." line).
COMPLETED = "Run is COMPLETED."


def cli() -> Path:
    """The running pyspark's ``spark-pipelines`` script."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-pipelines"


class PipelineRun(MemberProcess):
    """The example pipeline copied into ``folder`` and run against ``servers``/``topic``.

    :meth:`run_pipeline` runs ``spark-pipelines run`` with more arguments
    (``--full-refresh orders_raw``); :meth:`streaming_table` and :meth:`delta_table` read
    back the ``(partition, offset)`` of every row each table holds."""

    def __init__(
        self, folder: Path, servers: str, topic: str, spark_conf: Mapping[str, str] | None = None
    ) -> None:
        self.project = folder / "project"
        self.work = folder / "work"
        shutil.copytree(EXAMPLE, self.project, ignore=shutil.ignore_patterns("__pycache__"))
        for path in self.project.rglob("*"):
            if path.is_file():
                path.write_text(path.read_text().replace(EXAMPLE_WORK, str(self.work)))
        with (self.project / "conf" / "spark-defaults.conf").open("a") as defaults:
            defaults.writelines(f"{key} {value}\n" for key, value in (spark_conf or {}).items())
        super().__init__("pipeline", cli(), folder / "logs")
        self.env = {
            "KAFKA_BOOTSTRAP_SERVERS": servers,
            "ORDERS_TOPIC": topic,
            "SPARK_CONF_DIR": str(self.project / "conf"),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_HOME": str(cli().parents[1]),
        }

    def command(self) -> list[str]:
        spec = self.project / "spark-pipeline.yml"
        return [str(self.program), "run", "--spec", str(spec), *self.args]

    def run_pipeline(
        self, *args: str, timeout_s: float = 300.0, env: Mapping[str, str] | None = None
    ) -> int:
        """``spark-pipelines run ARGS`` to its end, once no other test process runs one; its
        exit code. :class:`AssertionError` with the end of its log if the Connect port is
        taken by something else."""
        with port_held(timeout_s):
            assert port_freed(PORT_FREED_S), (
                f"port {CONNECT_PORT} is taken: spark-pipelines could not start"
            )
            self.args = list(args)
            try:
                return self.run(timeout_s, {**self.env, **(env or {})})
            finally:
                # The CLI's Connect server may outlive the CLI for a moment: the lock covers
                # the port until it is free, so the next run finds it so.
                port_freed(PORT_FREED_S)

    def completed(self) -> bool:
        """Whether the last run printed that it completed."""
        return COMPLETED in self.last_log()

    def streaming_table(self) -> list[tuple[int, int]]:
        """``(partition, offset)`` of every row of the streaming table ``orders_raw``
        (Parquet, or Delta when the run wrote one)."""
        path = self.work / "warehouse" / "orders_raw"
        if not path.exists():
            return []
        if (path / "_delta_log").exists():
            table = DeltaTable(str(path)).to_pyarrow_table(columns=["partition", "offset"])
        else:
            table = pads.dataset(str(path), format="parquet").to_table(["partition", "offset"])
        return list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))

    def delta_table(self) -> list[tuple[int, int]]:
        """``(partition, offset)`` of every row of the delta-group sink's table."""
        path = self.work / "tables" / "orders"
        if not (path / "_delta_log").exists():
            return []
        table = DeltaTable(str(path)).to_pyarrow_table(columns=["partition", "offset"])
        return list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))


def port_freed(timeout_s: float) -> bool:
    """True once nothing listens on :data:`CONNECT_PORT`, polled for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", CONNECT_PORT)) != 0:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


@contextmanager
def port_held(timeout_s: float) -> Iterator[None]:
    """Hold :data:`PORT_LOCK` (waited for: another test process's run ends within its own
    timeout) for the block."""
    with PORT_LOCK.open("a") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"another test process held {PORT_LOCK} for {timeout_s:g} s"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
