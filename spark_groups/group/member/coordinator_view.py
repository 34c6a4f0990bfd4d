"""The group as its coordinator describes it (DescribeGroups), for waits that must not trust
the member's own view alone.

The coordinator knows an assignment before the member does: librdkafka delivers it at a
later poll. And under cooperative-sticky a partition that moves is owned by nobody between
the two rebalances that move it. So "nothing is in flight" is a question for the coordinator:
the group is stable, every subscribed partition has an owner, and this member's assignment is
the one librdkafka has delivered (:meth:`GroupView.settled_for`).

Threads: any; each call makes its own requests through the AdminClient it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from spark_groups.offsets import TopicPartition

log = logging.getLogger(__name__)

#: librdkafka settings an AdminClient takes from a member's configuration.
_CONNECTION_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.", "socket.", "client.")


def admin_for(config: Mapping[str, Any]) -> Any:
    """An AdminClient with the connection settings of a member's ``config``."""
    from spark_groups.kafka.client import AdminClient
    from spark_groups.kafka.logs import with_logger

    connection = {k: v for k, v in config.items() if k.startswith(_CONNECTION_PREFIXES)}
    return AdminClient(with_logger(connection))


@dataclass(frozen=True)
class GroupView:
    """One DescribeGroups answer: whether the group is stable, and what each member (by
    member id) owns."""

    stable: bool
    owned: Mapping[str, frozenset[TopicPartition]]

    def owned_by_others(self, member_id: str) -> frozenset[TopicPartition]:
        """The partitions members other than ``member_id`` own."""
        return frozenset(tp for m, tps in self.owned.items() if m != member_id for tp in tps)

    def settled_for(
        self,
        member_id: str,
        delivered: frozenset[TopicPartition],
        partitions: Collection[TopicPartition],
    ) -> bool:
        """True when no assignment is on its way to ``member_id``: the group is stable, each of
        ``partitions`` has an owner, and the coordinator's assignment of ``member_id`` is
        ``delivered``."""
        if not self.stable or self.owned.get(member_id, frozenset()) != delivered:
            return False
        owners = frozenset(tp for tps in self.owned.values() for tp in tps)
        return set(partitions) <= owners


class GroupsNotDescribed(Exception):
    """The broker does not describe groups (librdkafka's mock cluster): no answer will come."""


def describe(admin: Any, group_id: str, timeout_s: float) -> GroupView | None:
    """``group_id`` as the coordinator describes it, or None when it does not answer within
    ``timeout_s`` (logged at debug: the callers' own bounds end their waits). Raises
    :class:`GroupsNotDescribed` when the broker cannot describe groups at all."""
    from spark_groups.kafka.client import KafkaError, KafkaException

    try:
        group = admin.describe_consumer_groups([group_id])[group_id].result(timeout_s)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError._UNSUPPORTED_FEATURE:
            raise GroupsNotDescribed(str(exc)) from None
        log.debug("could not describe group %s: %s", group_id, exc)
        return None
    except Exception as exc:
        log.debug("could not describe group %s: %s", group_id, exc)
        return None
    owned = {
        m.member_id: frozenset(
            TopicPartition(p.topic, p.partition)
            for p in (m.assignment.topic_partitions if m.assignment else ())
        )
        for m in group.members
    }
    return GroupView(getattr(group.state, "name", str(group.state)) == "STABLE", owned)
