"""The whole-run scenario's section: the summary of the runs and its tables."""

from __future__ import annotations

import json
import statistics
from typing import Any

from bench.harness.docs import rate as _rate
from bench.harness.docs import ratio as _ratio
from bench.harness.procfs import PROCESS_KINDS

SPARK_SIDES = ("kafka-group", "spark-kafka", "spark-kafka-tuned", "python-floor")
PLAIN_SIDES = ("plain-defaults", "plain-tuned")
SIDES = (*SPARK_SIDES, *PLAIN_SIDES)

LABELS = {
    "kafka-group": "**kafka-group** -> noop",
    "spark-kafka": 'Spark `format("kafka")` -> noop, defaults',
    "spark-kafka-tuned": 'Spark `format("kafka")` -> noop, tuned',
    "python-floor": "Python streaming source floor (constant Arrow batches, no Kafka) -> noop",
    "plain-defaults": "plain confluent-kafka loop, librdkafka defaults",
    "plain-tuned": "plain confluent-kafka loop, reader's settings (`READER_DEFAULTS`)",
}


def summarize(records: int, results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per side: best and median rates of cold and warm whole runs and of the warm-only
    time (from the warm runs), CPU per million records, and kafka-group's time split."""
    summary: dict[str, Any] = {}
    for side, children in results.items():
        cold = [c["runs"][0] for c in children]
        warm = [r for c in children for r in c["runs"][1:]]
        row: dict[str, Any] = {}
        for name, runs, key in (("cold", cold, "whole_s"), ("warm", warm, "whole_s"),
                                ("warm_only", warm, "warm_only_s"),
                                ("cold_warm_only", cold, "warm_only_s")):  # fmt: skip
            rates = [records / r[key] for r in runs if r.get(key)]
            if rates:
                row[f"{name}_best"] = round(max(rates))
                row[f"{name}_median"] = round(statistics.median(rates))
        for name, runs in (("cold", cold), ("warm", warm)):
            if runs:
                row[f"{name}_cpu_s_per_m"] = {
                    k: round(statistics.median(r["cpu_s"][k] for r in runs) * 1e6 / records, 3)
                    for k in PROCESS_KINDS
                }
                for key in ("whole_s", "triggers_s", "first_latest_offset_s", "outside_triggers_s",
                            "define_s", "start_returned_s", "to_subscribed_s", "to_assigned_s",
                            "to_resumed_s"):  # fmt: skip
                    values = [r[key] for r in runs if r.get(key) is not None]
                    if values:
                        row[f"{name}_{key}"] = round(statistics.median(values), 3)
        sessions = [c["session_s"] for c in children if "session_s" in c]
        if sessions:
            row["session_s"] = round(statistics.median(sessions), 2)
        summary[side] = row
    return summary


def render(results: dict[str, Any]) -> str:
    """The markdown section: the command, date, load, and the tables (the tuning trials
    that chose :data:`.whole_run.SPARK_TUNED`, and ``--note`` lines, stay in the results: what the
    figures say is written after the section's end marker)."""
    s = results["summary"]
    cfg = results["config"]
    base, tuned = s.get("spark-kafka", {}), s.get("spark-kafka-tuned", {})
    loads = results["load"]
    lines = [
        "## Whole runs",
        "",
        f"`{results['command']}` ({results['date']}; {results['machine']['broker']}; "
        f"{cfg['rounds']} rounds, {cfg['warm_runs']} warm run(s) per cold one; took "
        f"{results['seconds'] / 60:.1f} min). Load average before: {loads['before']}; after: "
        f"{loads['after']} (`uptime`, 1/5/15 min) on {results['machine']['cores']} cores. "
        "kafka-group's executor read path: "
        f"{results['machine'].get('executor read path', 'python (before the native one)')}.",
        "",
        f"{cfg['records']:,} records x {cfg['size']} B in {cfg['partitions']} partitions, "
        "read from offset 0 into `noop` with `Trigger.AvailableNow`. *Whole run*: `start()` to "
        "the end of `awaitTermination()`. *Cold*: the first run in a fresh Python process "
        "with a new SparkSession (JVM up, nothing run yet: the run pays class loading and "
        "JIT, Python workers, kafka-group's reader process and imports, the group join, the "
        "first connections; the session's own start is not in it, see below). *Warm*: later "
        "runs in the same session. *Warm-only*: the throughput section's time (the sum of "
        "`triggerExecution`, less kafka-group's first `latestOffset`, the group join; plain "
        "loop: `assign()` to the last record). Rates: best of the runs (median in brackets); "
        "ratios: of the best. Every run is in `bench/results/whole_run.json`.",
        "",
        "| side | cold whole run (rec/s) | warm whole run (rec/s) | warm-only (rec/s) |"
        " cold vs Spark default / tuned | warm vs Spark default / tuned |"
        " warm-only vs Spark default / tuned |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    present = [(side, s[side]) for side in SIDES if s.get(side)]
    for side, r in present:
        cells = [LABELS[side]]
        for key in ("cold", "warm", "warm_only"):
            cells.append(f"{_rate(r.get(f'{key}_best'))} ({_rate(r.get(f'{key}_median'))})")
        for key in ("cold_best", "warm_best", "warm_only_best"):
            cells.append(
                f"{_ratio(r.get(key), base.get(key))} / {_ratio(r.get(key), tuned.get(key))}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    kg, plain = s.get("kafka-group", {}), s.get("plain-tuned", {})
    plain_d = s.get("plain-defaults", {})
    lines += [
        "",
        "kafka-group vs the plain loops (warm whole run): "
        f"{_ratio(kg.get('warm_best'), plain.get('warm_best'))} of the loop with the reader's "
        f'settings (the throughput section\'s "plain"), '
        f"{_ratio(kg.get('warm_best'), plain_d.get('warm_best'))} of the loop with librdkafka's "
        'defaults. Ratios to "plain" elsewhere in this file use the reader\'s settings.',
    ]
    floor = s.get("python-floor", {})
    if floor:
        lines[-1] += (
            " The Python streaming source floor (no Kafka, the rows prebuilt) against Spark's "
            "kafka source at its defaults: cold "
            f"{_ratio(floor.get('cold_best'), base.get('cold_best'))}, warm "
            f"{_ratio(floor.get('warm_best'), base.get('warm_best'))}; no source on Spark's "
            "Python data source API can pass it. kafka-group is "
            f"{_ratio(kg.get('cold_best'), floor.get('cold_best'))} (cold) and "
            f"{_ratio(kg.get('warm_best'), floor.get('warm_best'))} (warm) of the floor."
        )
    lines += [
        "",
        "CPU seconds per million records (median of the runs) by process: driver JVM / Python "
        "workers / reader process (kafka-group's member) / the PySpark driver or the plain "
        "loop / broker.",
        "",
        "| side | cold | warm |",
        "| --- | --- | --- |",
    ]
    for side, r in present:
        cells = [LABELS[side]]
        for kind in ("cold", "warm"):
            cpu = r.get(f"{kind}_cpu_s_per_m", {})
            shares = " / ".join(f"{cpu.get(k, 0):.2f}" for k in PROCESS_KINDS)
            cells.append(f"{shares} = {sum(cpu.values()):.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Where the whole run's time goes (seconds, median): `define` is `readStream...load()` "
        "before `start()` (not in the rate); `outside triggers` is the whole run less the sum "
        "of `triggerExecution` (query start-up before the first batch, the end after the "
        "last); `first latestOffset` is kafka-group's group join (for Spark's source, its "
        "first offset lookup); the SparkSession's start (JVM launch) is paid once per process.",
        "",
        "| side | run | define | whole | triggers | first latestOffset | outside triggers |"
        " session start |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side, r in present:
        if side not in SPARK_SIDES:
            continue
        for kind in ("cold", "warm"):
            cells = [LABELS[side], kind]
            for key in ("define_s", "whole_s", "triggers_s", "first_latest_offset_s",
                        "outside_triggers_s"):  # fmt: skip
                value = r.get(f"{kind}_{key}")
                cells.append("" if value is None else f"{value:.2f}")
            cells.append(f"{r['session_s']:.1f}" if kind == "cold" and "session_s" in r else "")
            lines.append("| " + " | ".join(cells) + " |")
    marks = [
        f"{kind} run: subscribed {kg.get(f'{kind}_to_subscribed_s', 'n/a')} s, assigned "
        f"{kg.get(f'{kind}_to_assigned_s', 'n/a')} s, first partitions resumed "
        f"{kg.get(f'{kind}_to_resumed_s', 'n/a')} s after `start()`"
        for kind in ("cold", "warm")
    ]
    lines += [
        "",
        "kafka-group's reader process log (median): " + "; ".join(marks) + ". Spark's kafka "
        f"source tuned: `{json.dumps(results['spark_tuned'])}`.",
    ]
    return "\n".join(lines)
