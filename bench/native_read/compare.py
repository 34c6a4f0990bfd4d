"""The executor read path: its native and Python paths against the plain loop.

    PYTHONPATH=. python3 bench/native_read/compare.py     # the extension built in place by
                                                          # pip install -e . (a C compiler)

Starts Apache Kafka (``spark_groups.tools.kafka_broker``; or ``--bootstrap-servers``), first
checks that both paths of ``spark_groups.read.reader.read_ranges`` yield the same batches
(null keys, headers, a transaction's control records and aborted records, several batches;
``tests/unit/test_reader.py`` checks the same in the tests), then produces each value size
to a 4-partition topic and reads all of it, as one task reading its 4 ranges, with:

  plain    confluent-kafka, one consumer on all 4 partitions, ``consume(500)``, touching each
           record's error and value (no Arrow): a Python loop's ceiling;
  python   ``spark_groups.read.reader.read_ranges``, ``read_path="python"`` (Arrow batches of
           10,000 rows);
  native   the same, ``read_path="native"`` (the same batches, built in C).

Every read runs in a fresh child process (same imports on every side), after a warm-up read of
1,000 records that creates the (pooled) consumer; all use the reader's librdkafka settings.
Rounds alternate the sides. Reported: best and median records/s, median CPU seconds per
million records of the reading process (all its threads: librdkafka's too) and of the broker,
the reading process's peak RSS and its RSS after the imports, the minor page faults of the
read and, with ``--callgrind SHARE``, instructions per record under valgrind (load-independent).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SIDES = ("plain", "python", "native")
_PLAIN_CONSUMER = None


# --------------------------------------------------------------------------- child process


def _rss_mb(field: str = "VmRSS") -> float:
    """This process's RSS (VmRSS), or its peak (VmHWM: unlike ru_maxrss, not inherited from
    the parent that forked it)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _plain(config: dict, topic: str, counts: list[int], warm: bool) -> int:
    from confluent_kafka import Consumer, TopicPartition

    global _PLAIN_CONSUMER
    if warm:
        _PLAIN_CONSUMER = Consumer(config)
    consumer = _PLAIN_CONSUMER
    expected = 1_000 if warm else sum(counts)
    parts = [0] if warm else range(len(counts))
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    seen = value_bytes = 0
    while seen < expected:
        for msg in consumer.consume(min(500, expected - seen), 1.0):
            if msg.error() is not None:
                continue
            value_bytes += len(msg.value())
            seen += 1
    consumer.unassign()
    return seen


def child(side: str, servers: str, topic: str, counts: list[int]) -> dict:
    import pyarrow  # noqa: F401  (every side imports the same modules)

    from spark_groups.offsets import OffsetRange
    from spark_groups.read import native
    from spark_groups.read.reader import read_ranges, reader_config

    config = {"bootstrap.servers": servers}
    if side == "native" and not native.available():
        raise SystemExit(f"the native read path cannot run: {native.load_error()}")
    rss_imports = _rss_mb()

    def run(warm: bool) -> int:
        ranges = (
            [(topic, 0, 0, 1_000)] if warm else [(topic, p, 0, n) for p, n in enumerate(counts)]
        )
        if side == "plain":
            plain_config = {k: v for k, v in reader_config(config).items() if not callable(v)}
            return _plain(plain_config, topic, counts, warm)
        batches = read_ranges(
            config, [OffsetRange(*r) for r in ranges], include_headers=False, read_path=side
        )
        return sum(batch.num_rows for batch in batches)

    run(warm=True)
    if os.environ.get("NATIVE_BENCH_WARM_ONLY"):  # the baseline of an instruction count
        counts = [0] * len(counts)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0, c0 = time.perf_counter(), os.times()
    rows = run(warm=False)
    t1, c1 = time.perf_counter(), os.times()
    f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return {
        "rows": rows,
        "seconds": t1 - t0,
        "cpu": (c1.user - c0.user) + (c1.system - c0.system),
        "peak_rss_mb": _rss_mb("VmHWM"),
        "rss_imports_mb": rss_imports,
        "page_faults": f1 - f0,
    }


# --------------------------------------------------------------------------- parent


def _proc_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def _broker_cpu(pid: int | None) -> float:
    """CPU of the broker's process tree (the launcher may wrap the JVM)."""
    if pid is None:
        return 0.0
    total = _proc_cpu(pid)
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            children = listing.read().split()
    except OSError:
        children = []
    return total + sum(_broker_cpu(int(c)) for c in children)


def run_child(
    side: str, servers: str, topic: str, counts: list[int], callgrind: str = "", warm_only=False
) -> dict:
    # numpy's OpenBLAS threads spin for a while after the import: noise on every side alike
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    if warm_only:
        env["NATIVE_BENCH_WARM_ONLY"] = "1"
    command = [sys.executable, __file__, "--child", side, "--bootstrap-servers", servers]
    command += ["--topic", topic, "--counts", ",".join(map(str, counts))]
    if callgrind:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={callgrind}", *command]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if callgrind:
        with open(callgrind) as listing:
            totals = [line for line in listing if line.startswith(("totals:", "summary:"))]
        result["instructions"] = int(totals[-1].split()[1])
        os.unlink(callgrind)
    return result


def instructions(servers: str, topic: str, counts: list[int], side: str) -> float:
    """Instructions per record of the read (all threads), under callgrind: the read less a
    run that only warms up; independent of the machine's load."""
    out = os.path.join(tempfile.gettempdir(), f"native-read-{uuid.uuid4().hex[:6]}.callgrind")
    full = run_child(side, servers, topic, counts, callgrind=out)["instructions"]
    base = run_child(side, servers, topic, counts, callgrind=out, warm_only=True)["instructions"]
    return (full - base) / sum(counts)


def check(servers: str) -> None:
    """The native path's batches equal the Python path's."""
    import pyarrow as pa
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from spark_groups.offsets import OffsetRange
    from spark_groups.read.reader import read_ranges

    topic, tx_topic = f"check-{uuid.uuid4().hex[:8]}", f"check-tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(topic, 4, 1), NewTopic(tx_topic, 1, 1)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in range(4_000):
        headers = [("h", b"%d" % i), ("empty", None)] if i % 3 == 0 else None
        key = None if i % 7 == 0 else b"k%d" % i
        producer.produce(topic, value=os.urandom(i % 50), key=key, partition=i % 4, headers=headers)
    producer.flush(30)
    tx = Producer({"bootstrap.servers": servers, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    tx.init_transactions(30)
    for commit in (True, False, True):
        tx.begin_transaction()
        for i in range(5):
            tx.produce(tx_topic, value=b"v%d" % i, partition=0)
        (tx.commit_transaction if commit else tx.abort_transaction)(30)
    _, tx_end = admin_watermark(servers, tx_topic)
    cases = [
        ("4 ranges, middle offsets", {}, [(topic, p, 100, 900 - 10 * p) for p in range(4)]),
        (
            "read_committed, control + aborted records",
            {"isolation.level": "read_committed"},
            [(tx_topic, 0, 0, tx_end)],
        ),
    ]
    for what, extra, ranges in cases:
        config = {"bootstrap.servers": servers, **extra}
        for headers in (False, True):
            for rows in (10_000, 333):
                ours, theirs = (
                    pa.Table.from_batches(
                        list(
                            read_ranges(
                                config,
                                [OffsetRange(*r) for r in ranges],
                                include_headers=headers,
                                max_batch_rows=rows,
                                read_path=path,
                            )
                        )
                    )
                    for path in ("native", "python")
                )
                key = [("partition", "ascending"), ("offset", "ascending")]
                if (
                    not ours.sort_by(key).equals(theirs.sort_by(key))
                    or ours.schema != theirs.schema
                ):
                    raise SystemExit(f"check failed: {what}, headers={headers}, rows={rows}")
        print(f"check ok: {what} ({ours.num_rows} rows, headers on and off, 2 batch sizes)")


def admin_watermark(servers: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "bench-native-wm"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="value sizes in bytes")
    parser.add_argument("--records", default="1000000,500000,100000", help="records per size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a tenth of the records, 2 rounds")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument(
        "--callgrind",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="also count instructions per record under valgrind, on this share of the records",
    )
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--counts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        counts = [int(c) for c in args.counts.split(",")]
        print(json.dumps(child(args.child, args.bootstrap_servers, args.topic, counts)))
        return 0

    sys.path.insert(0, ROOT)
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.read_bench import produce
    from spark_groups.tools.kafka_broker import KafkaBroker

    sizes = [int(s) for s in args.sizes.split(",")]
    records = [int(r) for r in args.records.split(",")]
    rounds = args.rounds
    if args.quick:
        records, rounds = [max(10_000, r // 10) for r in records], 2
    broker, servers, broker_pid = None, args.bootstrap_servers, None
    if not servers:
        broker = KafkaBroker(heap="1g").start()
        servers, broker_pid = broker.bootstrap_servers, broker._process.pid
    loads = [os.getloadavg()[0]]
    started = time.time()
    results: dict[int, dict[str, list[dict]]] = {}
    try:
        check(servers)
        admin = AdminClient({"bootstrap.servers": servers})
        for size, n in zip(sizes, records, strict=True):
            topic = f"native-{size}-{uuid.uuid4().hex[:6]}"
            admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(timeout=30)
            counts = produce(servers, topic, n, size, 4)
            print(f"produced {n:,} x {size} B")
            results[size] = {side: [] for side in SIDES}
            for round_no in range(1, rounds + 1):
                order = SIDES if round_no % 2 else SIDES[::-1]
                for side in order:
                    b0 = _broker_cpu(broker_pid)
                    r = run_child(side, servers, topic, counts)
                    r["broker_cpu"] = _broker_cpu(broker_pid) - b0
                    if r["rows"] != n:
                        raise SystemExit(f"{side} read {r['rows']} rows, expected {n}")
                    results[size][side].append(r)
                    print(
                        f"  {size:>5} B round {round_no} {side:>6}: "
                        f"{n / r['seconds']:>10,.0f} rec/s, cpu {r['cpu']:.2f} s, "
                        f"peak RSS {r['peak_rss_mb']:.0f} MB",
                        flush=True,
                    )
            if args.callgrind:
                part = [max(1, int(c * args.callgrind)) for c in counts]
                for side in SIDES:
                    results[size][side][0]["ir"] = ir = instructions(servers, topic, part, side)
                    print(f"  {size:>5} B {side:>6}: {ir:,.0f} instructions per record")
            loads.append(os.getloadavg()[0])
    finally:
        if broker is not None:
            broker.stop()
    report(results, sizes, records, rounds, loads, time.time() - started)
    return 0


def report(results, sizes, records, rounds, loads, took) -> None:
    print(
        f"\n{rounds} rounds, took {took / 60:.1f} min; load average (1 min) at the start and "
        f"after each size: {', '.join(f'{x:.2f}' for x in loads)}; cores: {os.cpu_count()}\n"
    )
    print(
        "| value | records | path | records/s: best (median) | vs python: best (median) "
        "| vs plain (best) | CPU s / 1M records: reader / broker (median) | peak RSS MB "
        "(after imports) | page faults / 1k records | instructions / record (vs python) |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, n in zip(sizes, records, strict=True):
        best = {s: n / min(r["seconds"] for r in results[size][s]) for s in SIDES}
        mid = {s: n / statistics.median(r["seconds"] for r in results[size][s]) for s in SIDES}
        for side in SIDES:
            runs = results[size][side]
            cpu = statistics.median(r["cpu"] for r in runs) / n * 1e6
            broker_cpu = statistics.median(r["broker_cpu"] for r in runs) / n * 1e6
            rss = max(r["peak_rss_mb"] for r in runs)
            base = min(r["rss_imports_mb"] for r in runs)
            faults = statistics.median(r["page_faults"] for r in runs) / n * 1e3
            ir = runs[0].get("ir")
            ir_text = f"{ir:,.0f} ({ir / results[size]['python'][0]['ir']:.2f}x)" if ir else ""
            print(
                f"| {size:,} B | {n:,} | {side} | {best[side]:,.0f} ({mid[side]:,.0f}) | "
                f"{best[side] / best['python']:.2f}x ({mid[side] / mid['python']:.2f}x) | "
                f"{best[side] / best['plain']:.2f}x | {cpu:.2f} / {broker_cpu:.2f} | "
                f"{rss:.0f} ({base:.0f}) | {faults:.0f} | {ir_text} |"
            )


if __name__ == "__main__":
    sys.exit(main())
