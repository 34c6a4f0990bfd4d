"""Waiting for the group's first assignment, and saying why it takes long.

A member may wait a long time for its first assignment for reasons that are not errors: a
rebalance waits for every member to rejoin (a member that left without LeaveGroup is
waited for until its session ends), a static member's predecessor still holds its place,
the broker delays a new group's first rebalance (``group.initial.rebalance.delay.ms``).
So a long-running query keeps waiting and says, every :data:`REPORT_EVERY_S` seconds, what
the group looks like (its state and members, from DescribeGroups) and who this member is.

It fails (:class:`~spark_groups.errors.GroupMembershipError`) only past a bound: the source
option ``joinTimeoutMs`` when the user gives one; under ``Trigger.AvailableNow`` (a run that
should end) :data:`AVAILABLE_NOW_BOUND_S` when the user gives none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from spark_groups.errors import GroupMembershipError
from spark_groups.group.member import GroupMember
from spark_groups.group.member.coordinator_view import admin_for, describe
from spark_groups.offsets import TopicPartition
from spark_groups.secrets import scrub

log = logging.getLogger(__name__)

#: How often (seconds) a member still waiting logs why.
REPORT_EVERY_S = 30.0
#: The first report comes sooner: a healthy join takes a few seconds.
FIRST_REPORT_S = 10.0
#: The bound of an AvailableNow run's wait when ``joinTimeoutMs`` is not set.
AVAILABLE_NOW_BOUND_S = 120.0


def before_planning(
    member: GroupMember,
    config: Mapping[str, Any],
    join_timeout_ms: int | None,
    available_now: Collection[TopicPartition] | None,
    first_plan: bool,
) -> None:
    """What a plan waits for (:func:`wait`): no bound unless ``joinTimeoutMs`` is set, or
    under AvailableNow (``available_now``: its partitions), whose first plan also waits
    while the member owns nothing and the group still hands partitions over
    (:func:`wait_for_a_share`). ``config`` is the member's."""
    bound_s = join_timeout_ms / 1000.0 if join_timeout_ms is not None else None
    if bound_s is None and available_now is not None:
        bound_s = AVAILABLE_NOW_BOUND_S
    group = str(config.get("group.id", ""))
    # The group is described only when the wait is reported.
    wait(member, group, bound_s, lambda: describe_group(config, group))
    if available_now is not None and first_plan:  # an empty first share may grow
        wait_for_a_share(member, config, group, available_now)


def wait(
    member: GroupMember,
    group_id: str,
    bound_s: float | None,
    describe: Callable[[], str],
    *,
    bound_option: str = "joinTimeoutMs",
) -> None:
    """Return once ``member`` has its first assignment (possibly empty). Log why it waits
    every :data:`REPORT_EVERY_S`; past ``bound_s`` (None: no bound) raise
    :class:`GroupMembershipError` with the same diagnosis."""
    started = time.monotonic()
    report_at = started + FIRST_REPORT_S
    while True:
        now = time.monotonic()
        until = report_at if bound_s is None else min(report_at, started + bound_s)
        if member.wait_for_assignment(max(0.0, until - now)):
            waited = time.monotonic() - started
            if waited >= FIRST_REPORT_S:
                log.info("first assignment from group %s after %.1f s", group_id, waited)
            return
        waited = time.monotonic() - started
        why = _why(member, describe)
        if bound_s is not None and waited >= bound_s:
            raise GroupMembershipError(
                f"no partition assignment from consumer group '{group_id}' within "
                f"{bound_option}={bound_s * 1000:.0f} ({why}). Leave {bound_option} unset to "
                "keep waiting, or find the member the group waits for (spark-groups describe)",
                group=group_id,
            )
        log.warning(
            "no partition assignment from consumer group '%s' yet after %.0f s; still waiting "
            "(%s; %s)",
            group_id,
            waited,
            why,
            "no bound: joinTimeoutMs is not set"
            if bound_s is None
            else f"failing after {bound_s:.0f} s",
        )
        report_at = time.monotonic() + REPORT_EVERY_S


def _why(member: GroupMember, describe: Callable[[], str]) -> str:
    me = f"this member: id {member.member_id or '(none yet)'}, generation {member.generation}"
    try:
        group = describe()
    except Exception as exc:  # a diagnosis must not end the wait
        return f"{me}; the group could not be described: {type(exc).__name__}: {exc}"
    hint = ""
    if not member.member_id and group.startswith("state STABLE"):
        hint = (
            "; the group is stable without this member: do its members use another "
            "partition.assignment.strategy or group.protocol? (INCONSISTENT_GROUP_PROTOCOL "
            "in the log)"
        )
    return f"{me}; the group: {group}{hint}"


def describe_group(config: Mapping[str, Any], group_id: str, timeout_s: float = 10.0) -> str:
    """The group's state and members as one line (DescribeGroups through an AdminClient of
    ``config``'s connection settings); secrets never appear in it."""
    try:
        admin = admin_for(config)
        group = admin.describe_consumer_groups([group_id])[group_id].result(timeout_s)
        cluster_id = str(admin.list_topics(timeout=timeout_s).cluster_id or "")
    except Exception as exc:
        return f"not described ({scrub(str(exc) or type(exc).__name__, config)})"
    broker_hint = ""
    if "tansu" in cluster_id.lower():
        broker_hint = (
            "; the broker is Tansu, which can keep a group leader that left during a "
            "rebalance and then never completes a join (docs/brokers.md): use a new group.id "
            "or restart the broker"
        )
    state = getattr(group.state, "name", str(group.state))
    members = [
        f"{m.client_id}@{m.host}"
        + (f" (static {m.group_instance_id})" if getattr(m, "group_instance_id", None) else "")
        + f" owning {len(m.assignment.topic_partitions) if m.assignment else 0}"
        for m in group.members
    ]
    listed = ", ".join(members) or "none"
    return f"state {state}, {len(members)} members: {listed}{broker_hint}"


def wait_for_a_share(
    member: GroupMember,
    config: Mapping[str, Any],
    group_id: str,
    subscribed: Collection[TopicPartition],
    bound_s: float = AVAILABLE_NOW_BOUND_S,
) -> None:
    """Under ``Trigger.AvailableNow``: while ``member`` owns nothing, wait until it owns
    something or every one of ``subscribed`` is owned by another member of the group (as the
    group's coordinator describes it), at most ``bound_s``.

    A member that joins a group whose other members hold every partition gets nothing in its
    first assignment under cooperative-sticky: the partitions it is to get are revoked from
    the others first and assigned in the rebalance that follows. A run that ended there would
    read nothing, every time it runs beside them. Partitions owned by nobody are such
    partitions in flight, and so are partitions the coordinator already lists as this
    member's that librdkafka has not delivered yet; once every one is owned by another
    member, the group has nothing more to give."""
    if member.assignment or not subscribed:
        return
    admin = admin_for(config)
    deadline = time.monotonic() + bound_s
    while not member.assignment and time.monotonic() < deadline:
        member.check()
        group = describe(admin, group_id, 10)
        if group is not None and set(subscribed) <= group.owned_by_others(member.member_id):
            return
        time.sleep(0.5)  # the next look at the group
    if not member.assignment:
        log.info(
            "Trigger.AvailableNow: group %s gave this member no partition within %.0f s",
            group_id,
            bound_s,
        )
