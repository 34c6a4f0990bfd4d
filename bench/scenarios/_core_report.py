"""The core scenario's section of docs/benchmarks.md: sections 1 to 4."""

from __future__ import annotations

import math
from typing import Any

from bench.harness.docs import met, rate, ratio
from bench.scenarios import _core_notes as notes
from bench.scenarios._core_notes import ms, sec, write_plot

__all__ = ["render", "write_plot"]


def _cpu(cpu: dict[str, float] | None, rows: int) -> str:
    if not cpu or not rows:
        return "n/a"
    per = 1e6 / rows
    return " / ".join(f"{cpu.get(k, 0.0) * per:.2f}" for k in ("bench", "spark", "broker"))


def render(results: dict[str, Any]) -> str:
    """Sections 1 to 4 (the hand-written "How each figure is measured" follows them)."""
    cfg = results["config"]
    t = results["throughput"]
    runs = t["runs"]
    plain = runs["plain"]["rate"]
    lines = [
        f"Sections 1 to 4: `{results['command']}` (add `--quick` for a smaller run, `--broker "
        "tansu` for the embedded broker, `--bootstrap-servers host:port` for another).",
        "",
        f"Run on {results['date']}, took {results['seconds'] / 60:.1f} min. "
        f"Load average (1 min) at the start and after each section: "
        f"{', '.join(str(x) for x in results['load_1min'])}"
        " (the machine is shared with other test runs, so absolute numbers are noisy). "
        "Seconds per section: "
        + ", ".join(f"{k} {v}" for k, v in results.get("section_s", {}).items())
        + ".",
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in results["machine"].items()) + ".",
    ]
    mb = t["size"] / 1e6
    lines += [
        "",
        "## 1. Throughput",
        "",
        f"{t['records']:,} records x {t['size']} B, {t['partitions']} partitions, read from "
        f"offset 0; best of {t['rounds']} round(s).",
        "",
        "| path | records/s | MB/s | vs Spark's kafka source | vs plain | CPU s per 1M records: "
        "bench process / Spark (JVM, Python workers) / broker |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    labels = {
        "plain": "plain confluent-kafka, one process, `consume(500)` loop",
        "read_range": "`spark_groups.read.reader.read_range`, same process, no Spark",
        "spark_ceiling": "Spark Python data source ceiling: constant Arrow batches -> noop",
        "spark_kafka": 'Spark\'s own `format("kafka")` -> `noop` (AvailableNow; **baseline**)',
        "noop": "**kafka-group -> `noop`** (warm, AvailableNow)",
        "delta-group": "kafka-group -> `delta-group` (exactly-once Delta sink)",
    }
    sk = runs["spark_kafka"]["rate"]
    for name, label in labels.items():  # run_throughput measures every path
        r = runs[name]["rate"]
        lines.append(
            f"| {label} | {rate(r)} | {r * mb:,.1f} | {ratio(r, sk)} | {ratio(r, plain)} | "
            f"{_cpu(runs[name].get('cpu'), runs[name]['rows'])} |"
        )
    noop, ceil, rr = runs["noop"]["rate"], runs["spark_ceiling"]["rate"], runs["read_range"]["rate"]
    lines += [
        "",
        f"**Headline: kafka-group -> noop runs at {ratio(noop, sk)} Spark's own Kafka source** "
        "(what a user would pick instead), on the same broker, records and Spark session. "
        f"Target kafka-group -> noop >= 0.9x plain: {met(noop >= 0.9 * plain)} "
        f"({noop / plain:.2f}x).",
        "",
        "Where the time goes. The executor read path alone (`read_range` over the same "
        f"partitions in one process, no Spark) runs at {rr / plain:.2f}x the plain loop ("
        f"{notes.read_path_words(results['machine'])}; its profile: `read_range_profile` in "
        "the saved results). A Python data source "
        "that does no Kafka work at all (one prebuilt Arrow batch of the same schema, yielded "
        f"again and again) reaches {rate(ceil)} records/s = {ceil / plain:.2f}x the plain loop: "
        "that is Spark's own cost of taking Arrow batches from a Python worker into the JVM "
        f"as rows. kafka-group reaches {noop / ceil:.2f}x of that ceiling. The CPU column "
        "shows the rest: per record, kafka-group pays the Python read path *and* Spark's "
        "conversion (plus planning, the commit log and the ledger), all on the same cores as "
        "the broker, where the plain loop pays only the first. "
        + notes.cpu_budget(runs, int(results["machine"].get("cores", 1)))
        + f" The warm time excludes the first batch's group join "
        f"({runs['noop']['excluded_s']:.1f} s); the CPU column covers the whole query, start-up "
        "included. Rows counted: "
        + ", ".join(f"{n} {runs[n]['rows']:,}" for n in runs)
        + f"; the delta-group table holds {runs['delta-group']['written']:,} rows (produced "
        f"{t['records']:,}).",
        "",
        *_delta_sinks(t),
        "## 2. Handover",
        "",
        f"A second member joins while the first reads a steady {cfg['handover_rate']} records/s "
        f"(4 partitions); kafka-group's trigger is {cfg['trigger_ms']} ms ([how each time is "
        "taken](#how-each-figure-is-measured)).",
        "",
        "| strategy | side | start() -> subscribe (s) | subscribe -> partitions (s) | "
        "subscribe -> first record (s) | first record vs plain | target (<= trigger + 2 s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    limit = cfg["trigger_ms"] / 1000 + 2
    handover_notes, batches = [""], []
    for strategy, res in results["handover"].items():
        p, s = res["plain"], res["spark"]
        if math.isfinite(s.get("sub_to_first_record_s", math.nan)):
            to_parts, to_first = s["sub_to_partitions_s"], s["sub_to_first_record_s"]
        else:  # no reader log: from start() instead
            to_parts, to_first = s["to_partitions_s"], s["to_first_record_s"]
        extra = to_first - p["to_first_record_s"]
        lines += [
            f"| {strategy} | plain | | {sec(p['to_partitions_s'])} | "
            f"{sec(p['to_first_record_s'])} | | |",
            f"| {strategy} | kafka-group | {sec(s.get('start_to_subscribe_s', math.nan))} | "
            f"{sec(to_parts)} | {sec(to_first)} | {extra:+.2f} s | {met(extra <= limit)} |",
        ]
        handover_notes.append(
            f"- {strategy}: partitions -> first record takes "
            f"{p['to_first_record_s'] - p['to_partitions_s']:.2f} s plain and "
            f"{s['to_first_record_s'] - s['to_partitions_s']:.2f} s for kafka-group (the new "
            "member's first micro-batch: plan after the assignment, wait for the trigger, run "
            "a Spark job)."
        )
        batches.append(
            f"| {strategy} | {s['a_batches_in_window']} | {s['a_batches_missing_kept']} | "
            f"{sec(s['a_longest_gap_s'])} |"
        )
    lines += [
        *handover_notes,
        "",
        "Batches of the first member between the second's start and its first record:",
        "",
        "| strategy | batches | batches where a partition it kept produced no rows | longest gap"
        " between its batches (s) |",
        "| --- | ---: | ---: | ---: |",
        *batches,
    ]
    if "cooperative-sticky" in results["handover"]:
        missing = results["handover"]["cooperative-sticky"]["spark"]["a_batches_missing_kept"]
        lines += ["", f"Target 0 for cooperative-sticky: {met(missing == 0)}."]
    sc, led = results["scale"], results["ledger"]
    st, pl, fe = sc["stream"], sc["plain"], sc["stream_fetch"]
    lines += [
        "",
        "## 3. Scale",
        "",
        f"{sc['partitions']:,} partitions in {sc['topics']} topic(s), one member owning all. "
        f"Driver time per batch: p50 of {cfg['plan_rounds']} batches, next to a plain "
        "consumer's ([how each is measured](#how-each-figure-is-measured)).",
        "",
        "| figure | kafka-group | plain baseline | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| driver time per batch, p50 (ms), endOffsets=auto (the default: ListOffsets on "
        f"Kafka) | {ms(st['batch_p50_s'])} | {ms(pl['batch_p50_s'])} | "
        f"{ratio(st['batch_p50_s'], pl['batch_p50_s'])} | < 100 ms: "
        f"{met(st['batch_p50_s'] < 0.1)} |",
        f"| driver time per batch, p50 (ms), endOffsets=fetch (for brokers that under-report "
        f"the log end, such as Tansu) | {ms(fe['batch_p50_s'])} | {ms(pl['batch_p50_s'])} | "
        f"{ratio(fe['batch_p50_s'], pl['batch_p50_s'])} | |",
        f"| reader-process RSS (MB) | {st['rss_mb']:.0f} | {pl['rss_mb']:.0f} | "
        f"{ratio(st['rss_mb'], pl['rss_mb'])} | < {notes.RSS_TARGET_MB} MB: "
        f"{met(st['rss_mb'] < notes.RSS_TARGET_MB)} |",
        f"| of which imports alone (pyspark, spark_groups, deltalake, pyarrow) (MB) | "
        f"{st['imports_rss_mb']:.0f} | | | |",
        *notes.memory_rows(st.get("memory_mb")),
        *notes.no_ledger_rows(sc.get("stream_no_ledger"), pl),
        f"| join until the first plan (s) | {sec(st['join_s'])} | {sec(pl['join_s'])} | | |",
        f"| ledger commit p50 (ms), last {led['window']:,} of {led['batches']:,} batches x "
        f"{led['partitions']} partitions, compaction every {led.get('compact_every', 200)} | "
        f"{ms(led['ledger_p50_s'])} | "
        f"{ms(led['kafka_p50_s'])} (Kafka commit) | "
        f"{ratio(led['ledger_p50_s'], led['kafka_p50_s'])} | < 30 ms: "
        f"{met(led['ledger_p50_s'] < 0.03)} |",
        f"| ledger commit p95 (ms) | {ms(led['ledger_p95_s'])} | {ms(led['kafka_p95_s'])} | | |",
        "",
        *notes.scale_notes(sc, led),
        "## 4. Cost growth",
        "",
        "Throughput (as in section 1) and driver time per batch (as in section 3) by partition "
        "count and record size. *Python source ceiling*: section 1's constant-Arrow source with "
        "values of the row's size, in 4 tasks (what any source on Spark's Python data source API "
        "could reach with such rows, Kafka aside).",
        "",
        "| partitions | value size | records | plain rec/s | Spark kafka rec/s | kafka-group "
        "rec/s | kafka-group / Spark kafka | kafka-group / plain | Python source ceiling "
        "rec/s (/ plain) | Spark kafka MB/s | kafka-group MB/s | driver ms/batch | "
        "plain ms/batch |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for r in results["growth"]:
        skr = r.get("spark_kafka_rate", math.nan)
        cr = r.get("ceiling_rate", math.nan)
        lines.append(
            f"| {r['partitions']:,} | {r['size']:,} B | {r['records']:,} | "
            f"{rate(r['plain_rate'])} | {rate(skr) if math.isfinite(skr) else 'n/a'} | "
            f"{rate(r['noop_rate'])} | {ratio(r['noop_rate'], skr)} | "
            f"{ratio(r['noop_rate'], r['plain_rate'])} | "
            f"{notes.ceiling_cell(r, cr, results['throughput']['size'])} | "
            f"{skr * r['size'] / 1e6:,.1f} | {r['noop_rate'] * r['size'] / 1e6:,.1f} | "
            f"{ms(r.get('plan_stream_s', math.nan))} | {ms(r.get('plan_plain_s', math.nan))} |"
        )
    lines += ["", *notes.growth_notes(results), "![cost growth](benchmarks.png)"]
    return "\n".join(lines)


def _sink_cost_ratio(ours: float, theirs: float) -> str:
    """The two sinks' own costs compared, or why this run cannot compare them.

    Each cost is a difference of two measured runs (into the table less into ``noop``); on a
    small run the noise can exceed the sink's cost, and a ratio of such differences means
    nothing.
    """
    if ours > 0 and theirs > 0:
        return f"alone costs {ratio(ours, theirs)} Spark's per record"
    return (
        "alone could not be compared: in this run a sink's cost was below the noise between "
        "its run and the same source into `noop`"
    )


def _delta_sinks(t: dict[str, Any]) -> list[str]:
    """Section 1b: delta-group against Spark's own Delta sink, per record."""
    sd, runs = t.get("spark_delta"), t["runs"]
    if not sd or "delta-group" not in runs:
        return []

    def us(run: dict[str, Any]) -> float:
        return 1e6 / run["rate"]

    ours = us(runs["delta-group"]) - us(runs["noop"])
    theirs = us(sd["delta"]) - us(sd["noop"])
    return [
        "### Delta sinks, per record",
        "",
        "The same records into a Delta table: kafka-group -> `delta-group` (exactly-once, "
        "delta-rs, pyspark 4.3) and Spark's `format(\"kafka\")` -> Spark's own "
        '`format("delta")` sink (pyspark 4.2, in a process of its own), each the best of the '
        "section's rounds. The sink's cost per record is the run into the table less the same "
        "source into `noop` (the delta-group sink-cost section below takes it apart).",
        "",
        "| path | records/s | µs per record | of which the sink (µs) | rows in the table |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| kafka-group -> `delta-group` | {rate(runs['delta-group']['rate'])} | "
        f"{us(runs['delta-group']):.2f} | {ours:.2f} | "
        f"{runs['delta-group'].get('written') or 0:,} |",
        f'| Spark kafka -> `format("delta")` (pyspark 4.2) | {rate(sd["delta"]["rate"])} | '
        f"{us(sd['delta']):.2f} | {theirs:.2f} | {sd['delta'].get('written') or 0:,} |",
        f"| Spark kafka -> `noop` (pyspark 4.2) | {rate(sd['noop']['rate'])} | "
        f"{us(sd['noop']):.2f} | | |",
        "",
        f"delta-group over Spark's Delta sink, end to end: "
        f"{ratio(runs['delta-group']['rate'], sd['delta']['rate'])} the records/s; the sink "
        f"{_sink_cost_ratio(ours, theirs)} "
        "(Spark's Delta sink is exactly-once per query, by the query's id and batch id; it keeps "
        "no per-partition offsets, so queries sharing a group's records could write one twice).",
        "",
    ]
