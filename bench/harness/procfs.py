"""What the machine and its processes spend: CPU by process group, memory, machine facts."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version


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


def machine_facts(broker: str) -> dict[str, str]:
    """Cores, RAM, CPU model, OS, Python and library versions; ``broker`` describes the
    broker."""

    def package(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    models: list[str] = []
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        models = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
    return {
        "cores": str(os.cpu_count()), "RAM": f"{mem_gb:.1f} GB",
        "CPU": models[0] if models else platform.processor() or "?",
        "OS": f"{platform.system()} {platform.release()}", "Python": platform.python_version(),
        "pyspark": package("pyspark"), "confluent-kafka": package("confluent-kafka"),
        "librdkafka": __import__("confluent_kafka").libversion()[0],
        "deltalake": package("deltalake"), "pyarrow": package("pyarrow"),
        "executor read path": executor_read_path(), "broker": broker,
    }  # fmt: skip


def executor_read_path() -> str:
    """Which executor read path ``readPath=auto`` (every benchmark's) runs on this machine,
    by the rule the reader itself uses (:func:`spark_groups.read.native.use_native`)."""
    from spark_groups.read import native

    if native.use_native("auto", {}):
        return "native (C extension)"
    why = native.load_error()
    return f"python ({why})" if why else f"python ({native.READ_PATH_ENV}=python)"


def loads_text() -> str:
    """The load averages as the sections print them: ``1.20, 2.11, 2.37``."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def uptime() -> str:
    """The ``uptime`` line (it holds the load averages)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _all_stats() -> dict[str, tuple[int, float, float]]:
    """(parent pid, own CPU seconds, CPU seconds of reaped children) of every process."""
    tick, stats = os.sysconf("SC_CLK_TCK"), {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                f = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone
        stats[pid] = (int(f[1]), (int(f[11]) + int(f[12])) / tick, (int(f[13]) + int(f[14])) / tick)
    return stats


def cmdline(pid: int | str) -> str:
    """A process's command line, its arguments joined by spaces ("" if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmd:
            return cmd.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(stats: Mapping[str, tuple]) -> dict[str, list[str]]:
    """The pids by parent pid (the first field of each stat)."""
    children: dict[str, list[str]] = {}
    for pid, stat in stats.items():
        children.setdefault(str(stat[0]), []).append(pid)
    return children


def descendants(root: int) -> list[int]:
    """``root`` and every process below it."""
    children = _children(_all_stats())
    out, todo = [], [str(root)]
    while todo:
        pid = todo.pop()
        out.append(int(pid))
        todo += children.get(pid, [])
    return out


def broker_pids() -> list[int]:
    """This process's descendants that run the broker (for :class:`CpuSampler`'s roots)."""
    return [p for p in descendants(os.getpid()) if "kafka.kafka" in cmdline(str(p)).lower()]


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


class CpuSampler:
    """CPU seconds by process group (:func:`process_kind`) of this process, its descendants
    and the processes under ``extra_roots`` (e.g. the broker), between :meth:`start` and
    :meth:`stop`. A thread reads /proc every ``interval_s`` and counts each process's own
    time in its own group; the reaped-children time a parent gains when a process ends goes
    to the ended process's group (one born and gone between two readings: its parent's)."""

    def __init__(self, extra_roots: Sequence[int] = (), interval_s: float = 0.1) -> None:
        self.roots = [os.getpid(), *extra_roots]
        self.interval_s = interval_s
        self.totals = dict.fromkeys(PROCESS_KINDS, 0.0)
        self._prev: dict[str, tuple[int, str, float, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _snapshot(self) -> dict[str, tuple[int, str, float, float]]:
        stats = _all_stats()
        children = _children(stats)
        out: dict[str, tuple[int, str, float, float]] = {}
        todo = [str(r) for r in self.roots if str(r) in stats]
        while todo:
            pid = todo.pop()
            if pid in out:
                continue
            known = self._prev.get(pid)
            kind = known[1] if known is not None else process_kind(cmdline(pid))
            ppid, own, reaped = stats[pid]
            out[pid] = (ppid, kind, own, reaped)
            todo += children.get(pid, [])
        return out

    def _account(self, now: dict[str, tuple[int, str, float, float]]) -> None:
        prev = self._prev
        for pid, (_, kind, own, _) in now.items():
            before = prev.get(pid)
            self.totals[kind] += own - (before[2] if before is not None else 0.0)
        gone = _children({pid: stat for pid, stat in prev.items() if pid not in now})
        for pid, (_, kind, _, reaped) in now.items():
            before = prev.get(pid)
            grew = reaped - before[3] if before is not None else 0.0
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


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class BusySampler:
    """The machine's busy CPU seconds every 50 ms, to tell how many cores a measured window
    kept busy (:meth:`cores_busy`)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="busy-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), machine_busy_s()))
            if self._stop.wait(0.05):
                return

    def __enter__(self) -> BusySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cores_busy(self, window: tuple[float, float] | None) -> float | None:
        """Average busy cores over ``window`` (epoch seconds), from the samples inside it."""
        inside = [s for s in self.samples if window and window[0] <= s[0] <= window[1]]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
