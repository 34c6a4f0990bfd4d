"""Pieces of the core scenario's section: notes under the tables, the plot, the profiles."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.harness.docs import met, rate, ratio
from spark_groups.offsets import OffsetRange
from spark_groups.read.tasks import DEFAULT_RECORDS_PER_TASK, pack_ranges

#: The reader process's RSS target (MB), section 3's.
RSS_TARGET_MB = 150
#: Where the reader process's memory is taken apart step by step (a link from the section).
MEMORY_STEPS = "[history.md](history.md#the-reader-processs-memory-step-by-step)"


def ms(seconds: float) -> str:
    return "n/a" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:,.1f}"


def sec(seconds: float) -> str:
    return "n/a" if seconds is None or math.isnan(seconds) else f"{seconds:.2f}"


def cpu_budget(runs: dict[str, Any], cores: int) -> str:
    """One sentence: CPU per record of kafka-group vs plain, and what 0.9x would need."""
    cpu = {n: runs[n].get("cpu") for n in ("plain", "noop", "spark_ceiling")}
    if not all(cpu.values()):
        return ""
    per = {n: sum(c.values()) * 1e6 / runs[n]["rows"] for n, c in cpu.items()}
    return (
        f"In all (every process, broker included) kafka-group -> noop used "
        f"{per['noop']:.2f} CPU-seconds per million records and the plain loop "
        f"{per['plain']:.2f} ({per['noop'] / per['plain']:.1f}x). Spark spreads the work over "
        f"{cores} cores where the plain loop uses about one, so reaching 0.9x needs at "
        f"most ~{cores / 0.9:.1f}x the plain loop's CPU per record on this "
        f"machine; Spark's conversion alone (the ceiling row) costs {per['spark_ceiling']:.2f}."
    )


def write_plot(results: dict[str, Any], path: Path) -> None:
    """Three panels: throughput by partitions, by record size, planning time by partitions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    growth, base_parts = results["growth"], results["config"]["partitions"]
    by_parts = sorted((r for r in growth if r["size"] == 100), key=lambda r: r["partitions"])
    by_size = sorted((r for r in growth if r["partitions"] == base_parts), key=lambda r: r["size"])
    rates = (("plain_rate", "o-", "plain consumer"), ("noop_rate", "s-", "kafka-group"),
             ("spark_kafka_rate", "^-", "Spark kafka"))  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, rows, x in ((axes[0], by_parts, "partitions"), (axes[1], by_size, "size")):
        for key, style, label in rates:
            if all(key in r for r in rows):
                mb = x == "size"
                ys = [r[key] * r["size"] / 1e6 if mb else r[key] for r in rows]
                noop = "" if mb or key == "plain_rate" else " -> noop"
                ax.plot([r[x] for r in rows], ys, style, label=label + noop)
    axes[0].set(xlabel="partitions", ylabel="records/s", title="throughput, 100 B records")
    axes[1].set(xlabel="record value size (bytes)", ylabel="MB/s")
    axes[1].set_title(f"throughput, {base_parts} partitions")
    planned = [r for r in by_parts if "plan_stream_s" in r]
    xs = [r["partitions"] for r in planned]
    axes[2].plot(xs, [r["plan_stream_s"] * 1000 for r in planned], "s-", label="GroupStream batch")
    axes[2].plot(xs, [r["plan_plain_s"] * 1000 for r in planned], "o-", label="plain list+commit")
    axes[2].axhline(100, color="grey", linestyle=":", label="target 100 ms")
    axes[2].set(xlabel="partitions", ylabel="ms per batch (p50)", title="driver time per batch")
    for ax in axes:
        ax.set(xscale="log", yscale="log")
        ax.legend()
    fig.suptitle(f"spark_groups benchmarks, {results['date']} (shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def cumtime(profile: str, function: str) -> float:
    """The cumulative seconds of ``function`` in a pstats listing (0 if absent)."""
    for line in profile.splitlines():
        if line.rstrip().endswith(f"({function})"):
            return float(line.split()[3])
    return 0.0


def read_path_words(machine: dict[str, str]) -> str:
    """What the read path's profile shows, by the path that ran."""
    if machine.get("executor read path", "").startswith("native"):
        return (
            "the native path: `fill` is its C loop, librdkafka's messages copied straight "
            "into the Arrow columns with no Python object per record"
        )
    return (
        "the Python path: `consume` is librdkafka handing over Message objects, `add` turns "
        "them into column lists, `to_batch` builds the Arrow arrays"
    )


def memory_rows(memory: dict[str, float] | None) -> list[str]:
    """Rows splitting the reader process's RSS into its own memory and mapped files."""
    if not memory:
        return []
    return [
        f"| of which mapped files, clean and shared (libraries' code; delta-rs' library alone "
        f"{memory['deltalake_lib']:.0f}) (MB) | {memory['file']:.0f} | | | |",
        f"| of which the process's own (anonymous) memory (MB) | {memory['anonymous']:.0f} | | | |",
    ]


def scale_notes(sc: dict[str, Any], led: dict[str, Any]) -> list[str]:
    profile = sc.get("stream_profiled", {}).get("profile", "")
    total = cumtime(profile, "latest_offset")
    notes = []
    if total:
        ends = cumtime(profile, "end_offsets")
        commit = cumtime(profile, "commit_durable")
        notes.append(
            f"- Driver time: asking the log ends (`end_offsets`, ListOffsets) is "
            f"{ends / total:.0%} of `latest_offset`; committing the previous batch "
            f"(ledger + Kafka) is {commit / total:.0%}; the rest is planning and bookkeeping "
            "(cProfile of the batches: `stream_profiled` in the saved results)."
        )
    nl, st = sc.get("stream_no_ledger"), sc["stream"]
    if nl:
        memory = (
            f"- Memory: the same member without `offsets.table` takes {nl['rss_mb']:.0f} MB; "
            f"the Delta ledger adds {st['rss_mb'] - nl['rss_mb']:.0f} MB, almost all at its "
            "first commit (delta-rs' library, runtime and table snapshot; without DataFusion "
            f"it is about as much: {MEMORY_STEPS}), independent of the partition count. The "
            "imports alone (pyspark, pyarrow, deltalake) take "
            f"{st['imports_rss_mb']:.0f} MB."
        )
        if st["rss_mb"] >= RSS_TARGET_MB:
            memory += (
                " The RSS target is missed by what a Delta writer in this process needs (step "
                f"by step in {MEMORY_STEPS}); keeping the ledger's writer out of the reader "
                "process would mean a second process or the JVM."
            )
        notes.append(memory)
    notes.append(
        f"- Ledger: p50 {led['ledger_p50_s'] * 1000:.1f} ms over the last {led['window']:,} of "
        f"{led['batches']:,} commits: one Delta commit (write a small Parquet file and a log "
        "entry) per batch, and it moves with machine load. It also grows with the Delta log, "
        f"which delta-rs lists on every commit: this run makes its {led['batches']:,} commits "
        f"in {led.get('total_s', 0) / 60:.0f} minutes, and the ledger keeps two minutes of log."
    )
    return [*notes, ""]


def ceiling_cell(row: dict[str, Any], ceiling_rate: float, section_1_size: int) -> str:
    """The ceiling of a growth row: measured for the value sizes; for the record size of
    section 1 its 2,000,000-record figure is the one to compare with (a 200,000-row batch job
    is mostly Spark's fixed cost)."""
    if row["size"] == section_1_size or not math.isfinite(ceiling_rate):
        return "section 1"
    return f"{rate(ceiling_rate)} ({ratio(ceiling_rate, row['plain_rate'])})"


def growth_notes(results: dict[str, Any]) -> list[str]:
    growth, t = results["growth"], results["throughput"]
    small = [r for r in growth if r["size"] == t["size"] and r["partitions"] == t["partitions"]]
    big = max(growth, key=lambda r: r["partitions"])
    notes = []
    if small:
        r = small[0]
        notes.append(
            f"- These runs are short ({r['records']:,} records take kafka-group "
            f"{r['records'] / r['noop_rate']:.1f} s at {r['partitions']} partitions), so the "
            "fixed cost of a query's batch (planning, scheduling, commit log) weighs more than "
            f"in section 1, which reads {t['records']:,} records of the same shape at "
            f"{t['runs']['noop']['rate']:,.0f} records/s."
        )
    per_partition = max(1, big["records"] // big["partitions"])
    tasks = len(
        pack_ranges(
            [OffsetRange("t", p, 0, per_partition) for p in range(big["partitions"])],
            DEFAULT_RECORDS_PER_TASK,
        )
    )
    notes.append(
        f"- At {big['partitions']:,} partitions of ~{per_partition:,} records a batch's ranges "
        f"are packed into {tasks:,} Spark task{'s' if tasks != 1 else ''} (`recordsPerTask`, "
        f"default {DEFAULT_RECORDS_PER_TASK:,}), each reading its ranges on one consumer, "
        f"instead of {big['partitions']:,} tasks of one range each; the plain consumer reads "
        "all partitions through one client."
    )
    sized = [
        r
        for r in sorted(growth, key=lambda r: r["size"])
        if r["size"] != t["size"] and math.isfinite(r.get("ceiling_rate", math.nan))
    ]
    if sized:
        cells = "; ".join(
            f"{r['size']:,} B: {r['ceiling_rate'] / r['plain_rate']:.2f}x the plain loop "
            f"({r['ceiling_rate'] * r['size'] / 1e6:,.0f} MB/s of values), kafka-group "
            f"{r['noop_rate'] / r['ceiling_rate']:.2f}x of it"
            for r in sized
        )
        notes.append(
            "- Large values: the Python source ceiling is itself far below the plain loop "
            f"({cells}). That is Spark's own path from a Python worker's Arrow batches to its "
            "rows, on the same two cores, so no source on Spark's Python data source API reaches "
            "0.5x the plain loop at these sizes on this machine; Spark's own kafka source (its "
            "rows built in the JVM) is slower still."
        )
    phases = big.get("noop_phases_s")
    if phases:
        notes.append(
            f"- Where kafka-group's time went at {big['partitions']:,} partitions: "
            + phases_text(phases)
            + " The plain loop reads the same records in "
            f"{big['records'] / big['plain_rate']:.2f} s: at this batch size Spark's fixed "
            "cost per batch (offset log, commit log, a job) is as large as the reading itself."
        )
    return [*notes, ""]


def phases_text(phases: dict[str, float]) -> str:
    """Spark's per-phase time of a query (its progress reports' ``durationMs``), in words."""
    names = {
        "latestOffset": "planning (`latestOffset`: commit the previous batch, ask the log ends)",
        "addBatch": "running the batch's tasks (`addBatch`: reading, Arrow into the JVM, noop)",
        "walCommit": "writing the offset log (`walCommit`)",
        "commitOffsets": "writing the commit log (`commitOffsets`)",
        "queryPlanning": "query planning",
        "getBatch": "`getBatch`",
    }
    batches = int(phases.get("batches", 0))
    parts = [f"{names[k]} {phases[k]:.2f} s" for k in names if phases.get(k, 0.0) >= 0.005]
    total = phases.get("triggerExecution", 0.0)
    return (
        f"{batches} batch{'es' if batches != 1 else ''}, {total:.2f} s in all (the first "
        f"batch's group join left out): " + ", ".join(parts) + "."
    )


def no_ledger_rows(nl: dict[str, Any] | None, pl: dict[str, Any]) -> list[str]:
    if not nl:
        return []
    return [
        f"| reader-process RSS without `offsets.table` (Kafka commits only) (MB) | "
        f"{nl['rss_mb']:.0f} | {pl['rss_mb']:.0f} | {ratio(nl['rss_mb'], pl['rss_mb'])} | "
        f"< {RSS_TARGET_MB} MB: {met(nl['rss_mb'] < RSS_TARGET_MB)} |",
        f"| driver time per batch without `offsets.table`, p50 (ms) | "
        f"{ms(nl['batch_p50_s'])} | {ms(pl['batch_p50_s'])} | "
        f"{ratio(nl['batch_p50_s'], pl['batch_p50_s'])} | |",
    ]


def profile_head(text: str, keep: int = 22) -> list[str]:
    rows = [x.rstrip() for x in text.splitlines() if x.strip()]
    start = next((i for i, x in enumerate(rows) if x.lstrip().startswith("ncalls")), 0)
    return [x.replace(str(Path.cwd()) + "/", "") for x in rows[start : start + keep]]
