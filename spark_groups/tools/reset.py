"""Setting a consumer group's position (``spark-groups reset``), in Kafka and in the ledger.

A group's position lives in Kafka's committed offsets and in the ledger, and a query resumes
from the furthest of the two, so :func:`apply_reset` refuses while the group has active
members (a member would overwrite the new offsets), sets Kafka's offsets and reads them back
(a broker that ignores the request is reported), then appends one reset marker per partition
to the ledger (:meth:`~spark_groups.ledger.OffsetLedger.record_reset`). Kafka goes first; a
reset is idempotent, so one whose ledger write failed is run again. Targets:
:func:`parse_target`. docs/cli.md, "reset".
"""

from __future__ import annotations

import getpass
import json
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spark_groups.errors import (
    BrokerUnreachableError,
    CommitError,
    GroupActiveError,
    OptionError,
)
from spark_groups.kafka.client import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    KafkaTopicPartition,
)
from spark_groups.kafka.logs import with_logger
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.ledger import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.secrets import scrub
from spark_groups.tools.describe import GroupState, admin_client, describe_group

log = logging.getLogger(__name__)

KINDS = ("earliest", "latest", "timestamp", "offsets-json")


@dataclass(frozen=True)
class ResetTarget:
    """Where to move the group: one of :data:`KINDS` and its argument."""

    kind: str
    timestamp_ms: int | None = None
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ResetStep:
    """One partition's move: from ``current`` (``None``: nothing committed) to ``new``."""

    partition: TopicPartition
    current: int | None
    new: int


def parse_timestamp(text: str, option: str) -> datetime:
    """An ISO 8601 time (naive means UTC) as a timezone-aware datetime."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise OptionError(option, f"not an ISO 8601 time: {text!r}") from None
    return value if value.utcoffset() is not None else value.replace(tzinfo=UTC)


def parse_target(text: str) -> ResetTarget:
    """Parse ``--to``: ``earliest``, ``latest``, ``timestamp:<ms|ISO>``, ``offsets-json:<json>``
    (or ``offsets-json <json>``)."""
    if text.strip().lower().startswith("offsets-json"):  # "offsets-json:{...}" or "... {...}"
        kind, arg = "offsets-json", text.strip()[len("offsets-json") :].lstrip(": \t")
    else:
        kind, _, arg = text.partition(":")
        kind = kind.strip().lower()
    if kind in ("earliest", "latest") and not arg:
        return ResetTarget(kind)
    if kind == "timestamp" and arg:
        if arg.strip().isdigit():
            return ResetTarget(kind, timestamp_ms=int(arg))
        moment = parse_timestamp(arg, "--to")
        return ResetTarget(kind, timestamp_ms=int(moment.timestamp() * 1000))
    if kind == "offsets-json" and arg:
        return ResetTarget(kind, offsets=_parse_offsets(arg))
    raise OptionError(
        "--to",
        f"expected earliest, latest, timestamp:<ms or ISO time> or "
        f'offsets-json:{{"topic": {{"0": 5}}}}; got {text!r}',
    )


def _parse_offsets(text: str) -> dict[TopicPartition, int]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError("--to", f"offsets-json is not valid JSON ({exc})") from None
    ok = isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values())
    if not ok:
        raise OptionError("--to", 'offsets-json must look like {"topic": {"0": 5}}')
    offsets: dict[TopicPartition, int] = {}
    for topic, parts in value.items():
        for partition, offset in parts.items():
            valid = str(partition).isdigit() and isinstance(offset, int) and offset >= 0
            if not valid or isinstance(offset, bool):
                raise OptionError(
                    "--to", f"offsets-json {topic}/{partition}: need a partition number and "
                    f"an offset >= 0, got {offset!r}",
                )  # fmt: skip
            offsets[TopicPartition(topic, int(partition))] = offset
    return offsets


def plan_reset(
    config: Mapping[str, Any],
    group: str,
    topics: list[str],
    target: ResetTarget,
    ledger_path: str | None,
    storage_options: dict[str, str] | None = None,
) -> tuple[GroupState, list[ResetStep]]:
    """The group's state and, per partition, its current and new position. Changes nothing.

    Raises :class:`OptionError` for an offset outside the log or a partition that is not
    one of ``topics``'.
    """
    if target.kind == "offsets-json":
        topics = sorted(set(topics) | {tp.topic for tp in target.offsets})
    state = describe_group(config, group, topics, ledger_path, storage_options=storage_options)
    rows = {row.partition: row for row in state.partitions}
    if target.kind == "offsets-json":
        unknown = sorted(tp for tp in target.offsets if tp not in rows)
        if unknown:
            raise OptionError("--to", f"partition {unknown[0]} does not exist")
        chosen = sorted(target.offsets)
    else:
        chosen = sorted(rows)
    with EndOffsetResolver(config) as resolver:
        starts = resolver.start_offsets(chosen)
    if target.kind == "earliest":
        new = starts
    elif target.kind == "latest":
        new = {tp: rows[tp].log_end for tp in chosen}
    elif target.kind == "timestamp":
        assert target.timestamp_ms is not None
        new = _offsets_for_time(config, chosen, target.timestamp_ms, rows)
    else:
        new = dict(target.offsets)
        for tp, offset in new.items():
            if not starts[tp] <= offset <= rows[tp].log_end:
                raise OptionError(
                    "--to",
                    f"offset {offset} of {tp} is outside the log "
                    f"[{starts[tp]}, {rows[tp].log_end}]",
                )
    return state, [ResetStep(tp, rows[tp].committed, new[tp]) for tp in chosen]


def _offsets_for_time(
    config: Mapping[str, Any], partitions: list[TopicPartition], ms: int, rows: Mapping
) -> dict[TopicPartition, int]:
    consumer = Consumer(
        with_logger({**config, "group.id": "spark-groups-reset", "enable.auto.commit": False})
    )
    try:
        found = consumer.offsets_for_times(
            [KafkaTopicPartition(tp.topic, tp.partition, ms) for tp in partitions], timeout=15
        )
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"cannot look up offsets by time on {config.get('bootstrap.servers')}: "
            f"{scrub(str(exc), config)}"
        ) from None
    finally:
        consumer.close()
    result = {}
    for kp in found:
        tp = TopicPartition(kp.topic, kp.partition)
        result[tp] = kp.offset if kp.offset >= 0 else rows[tp].log_end  # none that late: end
    return result


def who() -> str:
    """The ``member_id`` of reset markers: ``reset:<user>@<host>``."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment
        user = "unknown"
    return f"reset:{user}@{socket.gethostname()}"


def apply_reset(
    config: Mapping[str, Any],
    group: str,
    state: GroupState,
    steps: list[ResetStep],
    ledger_path: str | None,
    timeout_s: float = 15,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Set the group's position to ``steps`` in Kafka, then in the ledger (if given).

    Raises :class:`GroupActiveError` when the group has active members (before changing
    anything) or when the broker refused or ignored the change; :class:`CommitError` for any
    other refusal.
    """
    if state.active:
        raise GroupActiveError(
            f"group {group!r} is {state.state} with {state.members or 'unknown'} member(s): "
            "stop every member (queries and consumers) before resetting its offsets"
        )
    if not steps:
        return
    wanted = {s.partition: s.new for s in steps}
    request = ConsumerGroupTopicPartitions(
        group, [KafkaTopicPartition(tp.topic, tp.partition, o) for tp, o in sorted(wanted.items())]
    )
    admin = admin_client(config)
    try:
        altered = admin.alter_consumer_group_offsets([request])[group].result(timeout_s)
        check = ConsumerGroupTopicPartitions(
            group, [KafkaTopicPartition(tp.topic, tp.partition) for tp in sorted(wanted)]
        )
        read_back = admin.list_consumer_group_offsets([check])[group].result(timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        name_of = getattr(error, "name", None)
        name = name_of() if callable(name_of) else ""
        message = f"Kafka refused the new offsets of group {group!r}: {scrub(str(exc), config)}"
        if name in ("GROUP_NOT_EMPTY", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS"):
            raise GroupActiveError(message + " (is a member active?)") from None
        code = error.code() if isinstance(error, KafkaError) else None
        raise CommitError(message, partitions=wanted, code=code) from None
    except TimeoutError:
        raise BrokerUnreachableError(
            f"no answer from {config.get('bootstrap.servers')} within {timeout_s:.0f} s"
        ) from None
    refused = [p for p in altered.topic_partitions if p.error is not None]
    if refused:
        first = refused[0]
        message = (
            f"Kafka refused the new offset of {first.topic}/{first.partition} for group "
            f"{group!r}: {first.error.str()}"
        )
        if first.error.name() in ("GROUP_NOT_EMPTY", "UNKNOWN_MEMBER_ID"):
            raise GroupActiveError(message + " (a member joined meanwhile?)")
        raise CommitError(
            message,
            partitions=[TopicPartition(p.topic, p.partition) for p in refused],
            code=first.error.code(),
        )
    now = {TopicPartition(p.topic, p.partition): p.offset for p in read_back.topic_partitions}
    ignored = sorted(tp for tp, o in wanted.items() if now.get(tp) != o)
    if ignored:
        raise GroupActiveError(
            f"the broker accepted but did not apply the new offset of {ignored[0]} for group "
            f"{group!r} (it is at {now.get(ignored[0])}): is a member active?"
        )
    if ledger_path:
        previous = {s.partition: s.current for s in steps if s.current is not None}
        OffsetLedger(ledger_path, group, storage_options).record_reset(wanted, previous, who())
    log.info("group %r reset: %s", group, {str(tp): o for tp, o in sorted(wanted.items())})
