"""Member processes of a consumer group writing into delta-group, and what they wrote.

Shared by the integration tests (tests/integration/test_sink.py and its neighbours) and the
scenarios that run whole groups (bench/scenarios/rolling.py):

* :class:`Member`: one ``bench/sink_member.py`` process (its own Spark application) in its
  own process group: start, SIGTERM (:meth:`Member.terminate`, as a deployment stops it),
  SIGKILL, its log;
* :class:`IdProducer`: a producer thread writing ids 0, 1, 2, ... at a rate;
* :class:`PlainService`: a plain confluent-kafka consumer service in the same group;
* :func:`member_spec`: the spec the member processes of one group share;
* :func:`sink_commits`, :func:`reading_commits`: the sink table's commits, read from its log
  (cheap enough to poll).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.offsets import OffsetRange
from spark_groups.sink.plan import read_batch_plan
from spark_groups.storage.checkpoint import is_committed
from spark_groups.storage.files import location
from spark_groups.tools.checkout import package_checkout

REPO_ROOT = Path(__file__).resolve().parents[1]
MEMBER_SCRIPT = Path(__file__).with_name("sink_member.py")


class IdProducer(threading.Thread):
    """Produces ids 0, 1, 2, ... to the topic's partitions until stopped; remembers every id
    the broker acknowledged."""

    def __init__(self, servers: str, topic: str, partitions: int, per_second: int) -> None:
        super().__init__(daemon=True)
        self.servers, self.topic, self.partitions = servers, topic, partitions
        self.interval = 1.0 / per_second
        self.acked: set[int] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.servers, "linger.ms": "5"})

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.acked.add(int(message.value()))

        try:
            i = 0
            while not self.stop_event.is_set():
                producer.produce(
                    self.topic,
                    value=str(i).encode(),
                    partition=i % self.partitions,
                    on_delivery=delivered,
                )
                producer.poll(0)
                i += 1
                time.sleep(self.interval)
            assert producer.flush(30) == 0
        except BaseException as exc:
            self.error = exc
        finally:
            producer.close()


#: The commit info of each sink commit read so far, by log file (the files never change).
_COMMIT_INFOS: dict[str, dict | None] = {}


def sink_commits(table: Path | str, storage_options: Mapping[str, str] | None = None) -> list[dict]:
    """The commit info of every sink commit in the table's log (local or on S3), oldest
    first; read directly from the log files, each once: cheap enough to poll."""
    log = location(f"{table}/_delta_log", storage_options)
    selector = pafs.FileSelector(log.path, allow_not_found=True)
    names = sorted(i.path for i in log.fs.get_file_info(selector) if i.path.endswith(".json"))
    out = []
    for name in names:
        key = f"{table}::{name}"
        if key not in _COMMIT_INFOS:
            try:
                first = json.loads(log.read_text(name).splitlines()[0])
            except (OSError, ValueError, IndexError):
                continue  # being written
            info = first.get("commitInfo", {})
            _COMMIT_INFOS[key] = info if "spark_groups.ranges" in info else None
        if _COMMIT_INFOS[key] is not None:
            out.append(_COMMIT_INFOS[key])
    return out


def reading_commits(table: str, member: str) -> int:
    """How many of ``member``'s sink commits wrote records."""
    return sum(
        1
        for c in sink_commits(table)
        if c["spark_groups.member"] == member
        and any(json.loads(c.get("spark_groups.ranges", "{}")).values())
    )


def member_spec(
    servers: str, topic: str, group: str, tmp_path: Path, trigger: str
) -> tuple[dict, Path, Path]:
    """The spec shared by the member processes of one test (each adds its ``checkpoint``),
    the folder of their logs (created) and the file whose existence tells them to stop.
    The sink table is ``tmp_path / "table"``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    stop_file = tmp_path / "stop"
    spec = {
        "servers": servers,
        "topic": topic,
        "group": group,
        "table": str(tmp_path / "table"),
        "ledger": str(tmp_path / "ledger"),
        "stop_file": str(stop_file),
        "trigger": trigger,
    }
    return spec, logs, stop_file


class Member:
    """One member process: ``script`` (bench/sink_member.py, a Spark application, unless
    given: the crash matrix runs tests/crash/sim_member.py) with ``spec`` and its name as
    ``member``, in its own process group, logging to ``logs/NAME-RUN.log``."""

    def __init__(self, name: str, spec: dict, logs: Path, script: Path = MEMBER_SCRIPT) -> None:
        self.name, self.spec, self.logs, self.script = name, spec, logs, script
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    @property
    def running(self) -> bool:
        """The member's driver process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the member (again); ``env`` adds to its environment (the crash points')."""
        self.runs += 1
        log = (self.logs / f"{self.name}-{self.runs}.log").open("w")
        # bench/ and the same spark_groups as here, also in the member's Spark workers: this
        # checkout's (an editable install), or an installed wheel (the lanes of .ci/run, whose
        # PYTHONPATH exposes bench/ and not the checkout's package, which the repository root
        # on PYTHONPATH would put first).
        root = str(REPO_ROOT) if package_checkout() else None
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, SPARK_GROUPS_LOG_LEVEL="INFO", PYTHONPATH=path, **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, str(self.script), json.dumps({**self.spec, "member": self.name})],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(REPO_ROOT),
            start_new_session=True,  # its own process group: the JVM and Python workers too
        )
        log.close()

    def terminate(self, timeout_s: float = 120.0) -> float:
        """SIGTERM the member's whole process group (driver, JVM, Python workers), as a
        deployment stops it; wait for the driver to exit, then SIGKILL what is left of the
        group. Returns the seconds until the driver exited."""
        assert self.proc is not None
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout_s)
        exited = time.monotonic() - started
        self.wait_group_gone(timeout_s)
        return exited

    def wait_group_gone(self, timeout_s: float) -> None:
        """Wait until no process of the member's group is left (the reader process leaving
        the group may outlive the driver); SIGKILL them past ``timeout_s``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        self.reap()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the member to stop the way it watches for it (``spec["stop_file"]``), wait for
        it to exit, then SIGKILL whatever is left of its process group."""
        try:
            if self.running:
                assert self.proc is not None
                Path(self.spec["stop_file"]).touch()
                self.proc.wait(timeout_s)
        finally:
            self.kill()
            self.reap()

    def kill(self) -> None:
        """SIGKILL the member's whole process group (driver, JVM, Python workers)."""
        if self.running:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def reap(self) -> None:
        """After the member exited: SIGKILL whatever is left of its process group."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def commits(self, table: Path | str, storage_options: Mapping[str, str] | None = None) -> int:
        commits = sink_commits(table, storage_options)
        return sum(1 for c in commits if c["spark_groups.member"] == self.name)

    def log_text(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted(self.logs.glob(f"{self.name}-*.log"))
        )


def stop_all(members: Iterable[Member], stop_file: Path, timeout_s: float = 90.0) -> None:
    """Ask every member to stop the way bench/sink_member.py watches for it (``stop_file``)
    and wait for each to exit; :class:`AssertionError` with the member's log tail when one
    exits with an error, ``subprocess.TimeoutExpired`` when one does not exit in time."""
    stop_file.touch()
    for member in members:
        assert member.proc is not None, f"{member.name} was never started"
        code = member.proc.wait(timeout_s)
        assert code == 0, f"{member.name} exited with {code}: {member.log_text()[-3000:]}"


def unfinished_batch(checkpoint: str) -> list[OffsetRange]:
    """The ranges of the newest batch in a (local) checkpoint's offset log that Spark has not
    marked finished: what the query replays when it starts again ([] when none)."""
    ids = sorted(int(p.name) for p in (Path(checkpoint) / "offsets").glob("*") if p.name.isdigit())
    if not ids or is_committed(checkpoint, ids[-1]):
        return []
    return list(read_batch_plan(checkpoint, ids[-1]).ranges.values())


class PlainService(threading.Thread):
    """A consumer service in the group (confluent-kafka): processes each record (notes its
    id and when it was read), commits what it processed after every poll and, synchronously,
    in its revocation callback, so the next owner starts right after it. Notes every
    assignment change with its time and generation. ``helper``: an object whose
    ``on_assign(consumer, partitions)`` runs first in each assignment callback (e.g.
    :class:`spark_groups.handover.SinkTableHandover`, as the crash tests use it)."""

    def __init__(
        self, servers: str, topic: str, group: str, settings: dict[str, str], helper: Any = None
    ) -> None:
        super().__init__(daemon=True, name="plain-service")
        self.topic, self.helper = topic, helper
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": group,
                "client.id": "rolling-service",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **settings,
            }
        )
        #: (id, partition, offset, read at (epoch s), produced at (epoch s)) per record.
        self.reads: list[tuple[int, int, int, float, float]] = []
        self.events: list[dict[str, Any]] = []
        self.commit_failures = 0
        self._processed: dict[int, int] = {}
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _generation(self) -> int:
        from spark_groups.group.member import parse_generation

        try:
            return parse_generation(self.consumer.consumer_group_metadata())
        except Exception:
            return -1

    def _note(self, event: str, partitions: list[KafkaTopicPartition]) -> None:
        self.events.append(
            {
                "event": event,
                "at": time.time(),
                "partitions": sorted(p.partition for p in partitions),
                "generation": self._generation(),
            }
        )

    def _commit(self, partitions: Iterable[int]) -> None:
        offsets = [
            KafkaTopicPartition(self.topic, p, self._processed[p])
            for p in partitions
            if p in self._processed
        ]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException:
            self.commit_failures += 1  # the next owner reads those records again

    @property
    def ids(self) -> list[int]:
        """The ids it processed, in order."""
        return [r[0] for r in self.reads]

    def _on_assign(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        if self.helper is not None:
            self.helper.on_assign(consumer, partitions)
        self._note("assigned", partitions)

    def _on_revoke(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        self._commit(p.partition for p in partitions)
        for p in partitions:
            self._processed.pop(p.partition, None)
        self._note("revoked", partitions)

    def _on_lost(self, consumer: Any, partitions: list[KafkaTopicPartition]) -> None:
        for p in partitions:
            self._processed.pop(p.partition, None)
        self._note("lost", partitions)

    def run(self) -> None:
        try:
            self.consumer.subscribe(
                [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )  # fmt: skip
            while not self.stop_event.is_set():
                records = self.consumer.consume(500, 0.2)
                now = time.time()
                touched = set()
                for r in records:
                    if r.error() is not None:
                        continue
                    p, offset = r.partition(), r.offset()
                    assert p is not None and offset is not None
                    self.reads.append((int(r.value()), p, offset, now, r.timestamp()[1] / 1000))
                    self._processed[p] = offset + 1
                    touched.add(p)
                self._commit(touched)
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()  # the revocation callback commits, then it leaves

    def stop(self) -> None:
        """Stop, wait for it, raise what it failed with."""
        self.stop_event.set()
        self.join(60)
        if self.error is not None:
            raise RuntimeError(f"the plain consumer failed: {self.error}")
