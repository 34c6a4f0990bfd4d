"""The ``spark-groups`` command: look at, and set, a consumer group the way operators do.

Thin: parsing, tables, exit codes; the work is in the other modules of
:mod:`spark_groups.tools`. Client settings (e.g. SASL) are passed as ``-X key=value``, the
tables' storage settings (delta-rs' names) as ``--storage key=value``; their secret values
never appear in output or errors. Errors are :class:`~spark_groups.errors.SparkGroupsError`\\ s
printed as one line; exit codes: 1 error, 2 bad option, 3 the group has active members.
The commands: docs/cli.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from spark_groups.errors import GroupActiveError, OptionError, SparkGroupsError
from spark_groups.secrets import scrub
from spark_groups.storage.object_stores import check_commit_safety
from spark_groups.tools.describe import PartitionState, describe_group
from spark_groups.tools.lag import describe_trend

__all__ = ["PartitionState", "main"]

#: Exit status for a group that has active members (``reset``).
EXIT_GROUP_ACTIVE = 3
#: Exit status for a bad option value.
EXIT_BAD_OPTION = 2


class CliError(click.ClickException):
    """A :class:`SparkGroupsError` shown as one line, with an exit code by its type."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def clean_errors(config: dict[str, Any] | None = None) -> Iterator[None]:
    """Turn library errors into :class:`CliError` (secrets of ``config`` scrubbed)."""
    try:
        yield
    except SparkGroupsError as exc:
        code = 1
        if isinstance(exc, GroupActiveError):
            code = EXIT_GROUP_ACTIVE
        elif isinstance(exc, OptionError):
            code = EXIT_BAD_OPTION
        raise CliError(scrub(str(exc), config or {}), code) from None


def client_config(servers: str, settings: tuple[str, ...]) -> dict[str, Any]:
    """librdkafka settings from ``-b`` and ``-X key=value`` pairs."""
    config: dict[str, Any] = {"bootstrap.servers": servers}
    for number, item in enumerate(settings, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # Never echo it: it may be a password.
            raise CliError(f"-X expects key=value; setting number {number} is not", EXIT_BAD_OPTION)
        config[key.strip()] = value
    return config


def storage_config(pairs: tuple[str, ...]) -> dict[str, str]:
    """delta-rs storage options from ``--storage key=value`` pairs (the environment delta-rs
    reads, ``AWS_*`` and the like, applies too)."""
    options: dict[str, str] = {}
    for number, item in enumerate(pairs, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # Never echo it: it may be a secret key.
            raise CliError(
                f"--storage expects key=value; setting number {number} is not", EXIT_BAD_OPTION
            )
        options[key.strip()] = value
    return options


def writable(path: str | None, storage: dict[str, str], option: str) -> None:
    """Refuse to write to a table on S3 whose commits would not be safe beside the running
    members (the guard queries apply, docs/storage.md)."""
    if path:
        check_commit_safety(path, storage, option, prefix="--storage ")


#: ``--storage KEY=VALUE`` (repeatable), for every command that opens a table.
storage_option = click.option(
    "--storage", "storage", multiple=True, metavar="KEY=VALUE",
    help="a storage option of the tables, delta-rs' name as in the storage.* query options, "
    "e.g. --storage aws_conditional_put=etag (repeatable; the environment applies too)",
)  # fmt: skip


def kafka_options(command: Callable) -> Callable:
    """``-b/--bootstrap-servers`` and ``-X key=value`` (repeatable)."""
    command = click.option(
        "-X", "settings", multiple=True, metavar="KEY=VALUE",
        help="a librdkafka client setting, e.g. -X security.protocol=SASL_SSL (repeatable)",
    )(command)  # fmt: skip
    return click.option(
        "--bootstrap-servers", "-b", required=True, help="host:port of the cluster"
    )(command)


def _time(value: str | None, option: str) -> datetime | None:
    from spark_groups.tools.reset import parse_timestamp

    return None if value is None else parse_timestamp(value, option)


def _show(value: int | None) -> str:
    return "-" if value is None else str(value)


#: ``--partition TOPIC:P`` (repeatable), shared by the commands that filter by partition.
partition_option = click.option(
    "--partition",
    "partitions",
    multiple=True,
    metavar="TOPIC:P",
    help="only these partitions (repeatable)",
)


def _print_versions(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from spark_groups.tools.versions import versions_text

    click.echo(versions_text())
    ctx.exit()


@click.group()
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_versions,
    help="Show the versions of spark-groups, pyspark, confluent-kafka/librdkafka and deltalake.",
)
def main() -> None:
    """Inspect and manage consumer groups read by spark_groups queries."""


@main.command()
@click.argument("group")
@kafka_options
@click.option("--offsets-table", help="the group's Delta ledger (offsets.table)")
@click.option("--sink-table", help="the group's delta-group sink table (shows its gaps)")
@click.option("--topic", "topics", multiple=True, help="only these topics (default: all committed)")
@storage_option
def describe(
    group: str,
    bootstrap_servers: str,
    settings: tuple[str, ...],
    offsets_table: str | None,
    sink_table: str | None,
    topics: tuple[str, ...],
    storage: tuple[str, ...],
) -> None:
    """State of GROUP, and per partition: Kafka offset, ledger offset, log end, lag (and,
    with the ledger, whether the lag at commit time grew or shrank over the last hour)."""
    config = client_config(bootstrap_servers, settings)
    options = storage_config(storage)
    with clean_errors({**config, **options}):
        state = describe_group(
            config, group, list(topics), offsets_table, sink_path=sink_table,
            storage_options=options or None,
        )  # fmt: skip
    table = Table(title=f"group {group} ({state.state})")
    columns = ["topic", "partition", "kafka", "ledger", *(["sink"] if sink_table else [])]
    trend = ["lag trend"] if offsets_table else []
    for column in (*columns, "log end", "lag", *trend, "note"):
        table.add_column(column, justify="left" if column in ("topic", "note") else "right")
    for row in state.partitions:
        sink = [_show(row.sink)] if sink_table else []
        trend_cell = [describe_trend(row.lag_trend)] if offsets_table else []
        table.add_row(
            row.partition.topic, str(row.partition.partition), _show(row.kafka),
            _show(row.ledger), *sink, str(row.log_end), _show(row.lag), *trend_cell,
            row.disagreement,
        )  # fmt: skip
    Console(width=160).print(table)


@main.command(name="accept-gap")
@click.argument("group")
@click.option("--sink-table", required=True, help="the group's delta-group sink table")
@click.option("--partition", "partition", required=True, metavar="TOPIC:P", help="the partition")
@click.option(
    "--until", "until_offset", required=True, type=click.IntRange(min=0),
    help="leave the records up to this offset (exclusive) out: the group's position",
)  # fmt: skip
@click.option("--offsets-table", help="the group's Delta ledger (the decision is recorded)")
@click.option("--reason", default="", help="why (kept in the table's commit info)")
@storage_option
def accept_gap(
    group: str,
    sink_table: str,
    partition: str,
    until_offset: int,
    offsets_table: str | None,
    reason: str,
    storage: tuple[str, ...],
) -> None:
    """Record that GROUP's records of a partition, from where the sink table ends up to
    --until, are left out of the table; members holding the partition then read on."""
    from spark_groups.tools.accept_gap import run_accept_gap

    options = storage_config(storage)
    with clean_errors(options):
        writable(sink_table, options, "--sink-table")
        writable(offsets_table, options, "--offsets-table")
        done = run_accept_gap(
            group, sink_table, partition, until_offset, offsets_table, reason, options or None
        )
    if done.version is None:
        click.echo(f"{done.partition}: the table already reaches {done.table_offset}; nothing done")
    else:
        click.echo(
            f"{done.partition}: accepted the gap [{done.table_offset}, {done.until}) "
            f"(table version {done.version})"
        )


@main.command()
@click.argument("group")
@click.option("--offsets-table", required=True, help="the group's Delta ledger (offsets.table)")
@click.option(
    "--rebalances-table", help="the rebalance history (default: <offsets-table>_rebalances)"
)
@partition_option
@click.option("--since", help="from this ISO 8601 time on (naive = UTC)")
@click.option("--until", "until_", metavar="ISO", help="before this ISO 8601 time (naive = UTC)")
@click.option("--limit", type=click.IntRange(min=0), help="only the newest N events")
@storage_option
def history(
    group: str,
    offsets_table: str,
    rebalances_table: str | None,
    partitions: tuple[str, ...],
    since: str | None,
    until_: str | None,
    limit: int | None,
    storage: tuple[str, ...],
) -> None:
    """Committed batches and rebalances of GROUP in time order: who processed what, when."""
    from spark_groups.tools.timeline import parse_partition, timeline

    options = storage_config(storage)
    with clean_errors(options):
        wanted = [parse_partition(p) for p in partitions] or None
        events = timeline(
            offsets_table, group, rebalances_table, wanted,
            _time(since, "--since"), _time(until_, "--until"), limit, options or None,
        )  # fmt: skip
    table = Table(title=f"group {group}: {len(events)} event(s)")
    for column in ("time (UTC)", "partition", "event", "member", "gen", "what"):
        table.add_column(column, justify="right" if column == "gen" else "left")
    for e in events:
        table.add_row(
            e.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], str(e.partition), e.kind,
            e.member_id, str(e.generation), e.describe(),
        )  # fmt: skip
    Console(width=160).print(table)


@main.command()
@click.argument("group")
@kafka_options
@click.option("--topic", "topics", multiple=True, help="the topic(s) to reset (repeatable)")
@click.option(
    "--to", "to", required=True,
    help='earliest | latest | timestamp:<ms or ISO> | offsets-json:\'{"t": {"0": 5}}\'',
)  # fmt: skip
@click.option("--offsets-table", help="the group's Delta ledger: reset markers are appended")
@click.option("--dry-run", is_flag=True, help="print the plan (current -> new), change nothing")
@storage_option
def reset(
    group: str,
    bootstrap_servers: str,
    settings: tuple[str, ...],
    topics: tuple[str, ...],
    to: str,
    offsets_table: str | None,
    dry_run: bool,
    storage: tuple[str, ...],
) -> None:
    """Set GROUP's position in Kafka and in the ledger. The group must have no members."""
    from spark_groups.tools.reset import apply_reset, parse_target, plan_reset

    config = client_config(bootstrap_servers, settings)
    options = storage_config(storage)
    with clean_errors({**config, **options}):
        target = parse_target(to)
        if not topics and target.kind != "offsets-json":
            raise OptionError("--topic", "name the topic(s) to reset")
        if not dry_run:
            writable(offsets_table, options, "--offsets-table")
        state, steps = plan_reset(
            config, group, list(topics), target, offsets_table, options or None
        )
        table = Table(title=f"reset of group {group} ({state.state}) to {target.kind}")
        for column in ("topic", "partition", "current", "new", "change"):
            table.add_column(column, justify="left" if column == "topic" else "right")
        for s in steps:
            change = "-" if s.current is None else f"{s.new - s.current:+d}"
            table.add_row(
                s.partition.topic, str(s.partition.partition), _show(s.current), str(s.new), change
            )
        console = Console(width=120)
        console.print(table)
        if dry_run:
            note = " (the group is active: a real reset would be refused)" if state.active else ""
            console.print(f"dry run: nothing changed{note}")
            return
        apply_reset(config, group, state, steps, offsets_table, storage_options=options or None)
        where = "Kafka and the ledger" if offsets_table else "Kafka (no --offsets-table given)"
        console.print(f"reset {len(steps)} partition(s) in {where}")


@main.command(name="lag-plot")
@click.argument("group")
@kafka_options
@click.option("--offsets-table", required=True, help="the group's Delta ledger (offsets.table)")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="the PNG to write")
@partition_option
@storage_option
def lag_plot(
    group: str,
    bootstrap_servers: str,
    settings: tuple[str, ...],
    offsets_table: str,
    out: str,
    partitions: tuple[str, ...],
    storage: tuple[str, ...],
) -> None:
    """Plot GROUP's committed position and records behind the current log end, over time."""
    from spark_groups.kafka.watermarks import EndOffsetResolver
    from spark_groups.ledger import OffsetLedger
    from spark_groups.offsets import TopicPartition
    from spark_groups.tools.lag_plot import draw, lag_series
    from spark_groups.tools.timeline import parse_partition

    config = client_config(bootstrap_servers, settings)
    options = storage_config(storage)
    with clean_errors({**config, **options}):
        wanted = [parse_partition(p) for p in partitions] or None
        rows = OffsetLedger(offsets_table, group, options or None).history(wanted)
        if rows.num_rows == 0:
            raise SparkGroupsError(f"the ledger {offsets_table} has no rows for group {group!r}")
        seen = {
            TopicPartition(t, p)
            for t, p in zip(
                rows.column("topic").to_pylist(), rows.column("partition").to_pylist(), strict=True
            )
        }
        with EndOffsetResolver(config) as resolver:
            ends = resolver.end_offsets(seen)
        path = draw(lag_series(rows, ends), out, group)
    click.echo(f"wrote {path} ({len(seen)} partition(s), {rows.num_rows} ledger row(s))")


def _size(n: int) -> str:
    """Bytes for people (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@main.command()
@click.argument("table")
@click.option(
    "--target-size", metavar="SIZE",
    help="the size compacted files aim at, e.g. 128MB (default: the table's "
    "delta.targetFileSize, else 100MiB)",
)  # fmt: skip
@click.option(
    "--take-over", is_flag=True,
    help="take the maintenance lease of a compaction that certainly died",
)  # fmt: skip
@storage_option
def optimize(
    table: str, target_size: str | None, take_over: bool, storage: tuple[str, ...]
) -> None:
    """Compact the small files of the delta-group sink TABLE beside running members, then
    write a checkpoint and clean up expired log entries."""
    from spark_groups.tools.maintain import run_optimize

    options = storage_config(storage)
    with clean_errors(options):
        done = run_optimize(table, options, target_size, take_over)
    summary = Table(title=f"optimize {table}")
    for column in ("", "files", "bytes", "version"):
        summary.add_column(column, justify="left" if not column else "right")
    for name, files, version in (
        ("before", done.before, done.version_before),
        ("after", done.after, done.version_after),
    ):
        summary.add_row(name, str(files.files), _size(files.bytes), str(version))
    console = Console(width=120)
    console.print(summary)
    console.print(
        f"{done.removed} file(s) compacted into {done.added}"
        + (f" ({done.attempts} attempts)" if done.attempts > 1 else "")
    )


@main.command()
@click.argument("table")
@click.option(
    "--retain-hours", type=click.IntRange(min=0),
    help="delete unreferenced files older than N hours (default and minimum: the table's "
    "delta.deletedFileRetentionDuration, 7 days unless set; at least 1 while members run)",
)  # fmt: skip
@click.option(
    "--members-stopped", is_flag=True,
    help="every member writing TABLE is stopped: allow a retention below one hour",
)  # fmt: skip
@storage_option
def vacuum(
    table: str, retain_hours: int | None, members_stopped: bool, storage: tuple[str, ...]
) -> None:
    """Delete the data files the delta-group sink TABLE no longer references, removed (or
    written) longer ago than the retention, beside running members."""
    from spark_groups.tools.maintain import run_vacuum

    options = storage_config(storage)
    with clean_errors(options):
        done = run_vacuum(table, options, retain_hours, members_stopped)
    click.echo(
        f"vacuum {table}: {len(done.deleted)} file(s) deleted, unreferenced for more than "
        f"{done.retention_hours:g} hours (version {done.version})"
    )


@main.command()
@click.option(
    "--work-dir", type=click.Path(file_okay=False), help="where the demo writes (emptied first)"
)
def demo(work_dir: str | None) -> None:
    """README command one: embedded broker, sample orders, the ingest job, what landed."""
    from pathlib import Path

    from spark_groups.tools.demo import run_demo

    with clean_errors():
        run_demo(Path(work_dir) if work_dir else None)


@main.command(name="pipeline-demo")
def pipeline_demo() -> None:
    """The example pipeline (jobs/pipeline) on the embedded broker: two spark-pipelines
    runs with new orders between them, then what landed (Spark 4.1+, docs/pipelines.md)."""
    from spark_groups.tools.pipeline_demo import run_pipeline_demo

    with clean_errors():
        run_pipeline_demo()


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=9092, show_default=True)
@click.option("--topic", default="orders", show_default=True, help="topic to create ('' for none)")
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--rate",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="sample orders produced per second (0: none)",
)
def broker(port: int, topic: str, partitions: int, rate: int) -> None:
    """Run the embedded broker in the foreground until Ctrl-C (or SIGTERM), producing orders."""
    from spark_groups.tools.demo import serve_broker

    with clean_errors():
        serve_broker(port, topic, partitions, rate)
