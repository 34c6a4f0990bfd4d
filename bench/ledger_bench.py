"""Commit and lookup latency of the Delta offsets ledger, with and without maintenance.

Appends ``--batches`` batches (one row per partition, one Delta commit each) to two ledgers
in fresh directories, interleaved so that both see the same machine load:

  maintained: ``OffsetLedger(compact_every=--compact-every)`` (compaction + vacuum +
              checkpoint every N table versions);
  plain:      ``OffsetLedger(compact_every=0)`` (never; delta-rs still checkpoints every
              100 commits on its own).

Then prints, side by side, p50/p95/max of the append time for the first and the last
``--window`` commits, the time of ``latest_positions`` on the open ledger (warm) and on a
fresh object (cold: what a restarted driver pays), ``history()``, and the table's shape.

    python bench/ledger_bench.py                                    # 1000 batches, ~2.5 min
    python bench/ledger_bench.py --batches 2000 --partitions 4      # ~6.5 min on 2 busy cores
    python bench/ledger_bench.py --batches 10000 --partitions 4     # long: plain gets slow

The windows are ``--window`` commits (default: 1000, or half of ``--batches`` if that is
less). Nearly all of the run time is the unmaintained ledger's.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from deltalake import DeltaTable

from spark_groups.ledger import LedgerRow, OffsetLedger
from spark_groups.offsets import TopicPartition


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    """``seconds`` as a short millisecond string."""
    return f"{seconds * 1000:8.1f}"


def timed(fn: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def batch_rows(batch: int, partitions: int, now: datetime) -> list[LedgerRow]:
    """The ledger rows of one batch: 100 offsets per partition."""
    return [
        LedgerRow("orders", p, batch * 100, batch * 100 + 100, "member-1", 1, batch, now)
        for p in range(partitions)
    ]


def shape(path: Path) -> str:
    """Active data files, Parquet files on disk, and log entries of the table at ``path``."""
    table = DeltaTable(str(path))
    on_disk = len(list(path.glob("*.parquet")))
    log = len(list((path / "_delta_log").glob("*.json")))
    return (
        f"version {table.version()}, {len(table.file_uris())} active files, "
        f"{on_disk} parquet files on disk, {log} json log entries"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compact-every", type=int, default=200)
    parser.add_argument("--window", type=int, help="commits per reported window")
    parser.add_argument("--dir", help="where to create the tables (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tables afterwards")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    root = Path(args.dir or tempfile.mkdtemp(prefix="ledger-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    variants = {
        f"compact_every={args.compact_every}": args.compact_every,
        "compact_every=0": 0,
    }
    ledgers = {
        name: OffsetLedger(str(root / name), "bench-group", compact_every=every)
        for name, every in variants.items()
    }
    times: dict[str, list[float]] = {name: [] for name in ledgers}
    names = list(ledgers)
    started = time.perf_counter()
    try:
        for batch in range(args.batches):
            rows = batch_rows(batch, args.partitions, datetime.now(UTC))
            # Alternate who goes first, so neither always pays for the other's cache misses.
            for name in names if batch % 2 == 0 else reversed(names):
                t0 = time.perf_counter()
                ledgers[name].append(rows)
                times[name].append(time.perf_counter() - t0)
            if (batch + 1) % 500 == 0:
                print(f"  {batch + 1} batches, {time.perf_counter() - started:.0f} s", flush=True)

        window = args.window or min(1000, max(1, args.batches // 2))
        window = min(window, args.batches)
        print(
            f"\n{args.batches} batches x {args.partitions} partitions "
            f"({time.perf_counter() - started:.0f} s in all), in {root}"
        )
        header = f"{'':34}" + "".join(f"{name:>26}" for name in names)
        print(header)

        def line(label: str, value: Callable[[str], str]) -> None:
            print(f"{label:34}" + "".join(f"{value(name):>26}" for name in names))

        for label, part in (
            (f"append, first {window}", slice(0, window)),
            (f"append, last {window}", slice(-window, None)),
        ):
            for q_label, fn in (
                ("p50", lambda v: percentile(v, 0.50)),
                ("p95", lambda v: percentile(v, 0.95)),
                ("max", max),
            ):
                line(f"{label} {q_label} ms", lambda n, p=part, f=fn: ms(f(times[n][p])))

        wanted = [TopicPartition("orders", p) for p in range(args.partitions)]
        expected = {tp: args.batches * 100 for tp in wanted}
        for name, ledger in ledgers.items():
            assert ledger.latest_positions() == expected, name
        line("latest_positions warm p50 ms", lambda n: ms(timed(ledgers[n].latest_positions, 20)))
        line(
            "latest_positions(parts) warm ms",
            lambda n: ms(timed(lambda: ledgers[n].latest_positions(wanted), 20)),
        )
        line(
            "latest_positions cold p50 ms",
            lambda n: ms(
                timed(lambda: OffsetLedger(str(root / n), "bench-group").latest_positions(), 5)
            ),
        )
        line("last_batch warm p50 ms", lambda n: ms(timed(ledgers[n].last_batch, 20)))
        line("history() warm p50 ms", lambda n: ms(timed(ledgers[n].history, 5)))
        for name in names:
            print(f"{name}: {shape(root / name)}")
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
