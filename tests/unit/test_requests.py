"""Every request the owner thread serves runs with a revocation pending, and none delivers it.

A request that polled the consumer would run the revocation's barrier inside itself, while
the thread that sent it waits for the owner thread: the freeze found four times before the
driver's state moved onto that thread. Here the member's own polls are held back
(``PendingRevocation``) while a newcomer joins, so the revocation is pending through every
request of a whole query's life (a replay after a restart, triggers, reports, a stop); it
must not be delivered by any of them, and once the hold ends it must run outside every
request and leave the offsets exact. Real broker, real sink table, no Spark.
"""

from __future__ import annotations

import ast
import inspect
import uuid
from collections.abc import Callable
from pathlib import Path

from revocation_support import PendingRevocation
from test_barrier_release import log_batch
from test_claim_races import committed, land, seeded, source_options

from spark_groups.group import stream as stream_module
from spark_groups.group.member import GroupMember
from spark_groups.group.stream import REQUESTS, GroupStream
from spark_groups.offsets import BatchOffset, OffsetRange, TopicPartition
from spark_groups.options import parse_options
from spark_groups.sink.delta_arbiter import for_source

from support.broker import produce_ids, wait_until

#: What each scenario below sends while a revocation is pending.
WITH_SINK_TABLE = {
    "_planned",
    "_first_plan_pending",
    "_replay",
    "_planned_here",
    "_report",
    "_resume",
    "_uncommitted",
    "_safe_point",
    "_after_commit",
    "_record_plan",
    "_release_all",
    "_finished",
    "_commit_finished",
    "_stopped",
}
WITH_CHECKPOINT = {"_finished", "_commit_finished", "_stopped"}
#: Requests these scenarios cannot reach, and where their parts are tested.
ELSEWHERE = {
    "_moved_to_end": "a log that went backwards: test_driver_parts.py",
    "_commit_releasing": "a release Kafka refused for a moved-on generation: test_driver_parts.py",
}


def test_every_request_of_the_stream_is_named() -> None:
    """``REQUESTS`` is the list of what other threads send: every ``self._on_owner(self.X``
    in stream.py names one of them, and every one is sent somewhere."""
    tree = ast.parse(inspect.getsource(stream_module))
    sent = {
        call.args[0].attr
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "_on_owner"
        and call.args
        and isinstance(call.args[0], ast.Attribute)
    }
    commits = {"_safe_point", "_commit_finished"}  # sent through GroupStream._commit
    assert sent | commits == set(REQUESTS)
    assert WITH_SINK_TABLE | WITH_CHECKPOINT | set(ELSEWHERE) == set(REQUESTS)


def newcomer(options_member_config: dict[str, str], topic: str) -> GroupMember:
    return GroupMember({**options_member_config, "session.timeout.ms": "6000"}, [topic]).start()


def test_a_replay_triggers_reports_and_a_stop_with_sink_table_never_deliver_a_revocation(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
) -> None:
    topic, group, table = seeded(bootstrap_servers, make_topic, tmp_path)  # table holds 0-4
    checkpoint = tmp_path / "checkpoint"
    options = source_options(
        bootstrap_servers, topic, group, table, checkpointLocation=str(checkpoint)
    )
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    # What a run before a restart logged and never finished: batch 3 read [5, 8) of both.
    logged = BatchOffset.of(3, [OffsetRange(topic, 0, 5, 8), OffsetRange(topic, 1, 5, 8)])
    log_batch(checkpoint, 3, logged, committed=False)
    stream = GroupStream(options, for_source(options))
    streams.append(stream)
    member = stream.ensure_started()
    wait_until(lambda: member.assignment == {p0, p1}, what="the first assignment")
    ran: list[str] = []
    with PendingRevocation(stream) as pending:
        joined = newcomer(options.member_config(), topic)
        try:
            pending.wait_until_rebalancing(bootstrap_servers, 2)
            replayed = stream.batch_to_read(logged)  # a replay: where the group stands first
            assert replayed.ends() == {p0: 8, p1: 8}
            land(table, topic, replayed, group)
            assert stream.planned_here(3) and stream.report_latest() is not None
            planned = BatchOffset.from_json(stream.latest_offset(logged.to_json(), None))
            assert planned.ends() == {p0: 10, p1: 10}  # the replay committed; the next plan
            assert stream.batch_to_read(planned) == planned
            land(table, topic, planned, group)
            assert stream.metrics.revocations == 0  # pending all along: no request ran it
            pending.deliver()
            wait_until(lambda: bool(joined.assignment), what="the newcomer's partition")
            moved = joined.assignment
            assert set(pending.running_at_revocation) == {0}  # never inside a request
            assert joined.committed(moved) == {tp: 10 for tp in moved}
        finally:
            joined.close()
        ran += pending.requests
    # A stop while another newcomer's rebalance is pending: the release's requests too.
    with PendingRevocation(stream) as pending:
        joined = newcomer(options.member_config(), topic)
        try:
            pending.wait_until_rebalancing(bootstrap_servers, 2)
            stream.stop()
            assert stream.metrics.barrier_timeouts == 0 and stream.metrics.failed_commits == 0
            assert set(pending.running_at_revocation) <= {0}
        finally:
            joined.close()
        ran += pending.requests
    assert committed(bootstrap_servers, topic, group, [p0, p1]) == {p0: 10, p1: 10}
    assert set(ran) == WITH_SINK_TABLE, sorted(set(ran) ^ WITH_SINK_TABLE)


def test_a_stop_that_commits_a_finished_batch_never_delivers_a_revocation(
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    streams: list[GroupStream],
    tmp_path: Path,
) -> None:
    """Without ``sink.table`` a stop commits what the checkpoint's commit log says Spark
    finished (the query's last batch, which Spark never hands back to its source)."""
    topic, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    produce_ids(bootstrap_servers, topic, range(10 * 2), 2)
    checkpoint = tmp_path / "checkpoint"
    options = parse_options(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "subscribe": topic,
            "group.id": group,
            "startingOffsets": "earliest",
            "checkpointLocation": str(checkpoint),
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "500",
        }
    )
    stream = GroupStream(options)
    streams.append(stream)
    batch = BatchOffset.from_json(stream.latest_offset(BatchOffset.initial().to_json(), None))
    log_batch(checkpoint, 0, batch, committed=True)  # Spark finished it: the query ends
    with PendingRevocation(stream) as pending:
        joined = newcomer(options.member_config(), topic)
        try:
            pending.wait_until_rebalancing(bootstrap_servers, 2)
            stream.stop()
            assert set(pending.requests) == WITH_CHECKPOINT, pending.requests
            assert set(pending.running_at_revocation) <= {0}
        finally:
            joined.close()
    parts = [TopicPartition(topic, p) for p in (0, 1)]
    assert committed(bootstrap_servers, topic, group, parts) == {tp: 10 for tp in parts}
