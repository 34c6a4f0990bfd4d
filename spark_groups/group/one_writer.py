"""One member only, where the group's tables are safe for one writer only.

delta-rs commits to a table on a Databricks FUSE mount (``allow_unsafe_rename``) or on S3
without conditional writes (``aws_s3_allow_unsafe_rename``) as check-then-rename: two writers
can both find version N free and the second rename overwrites the first commit. The user
opted in for one writer; :class:`OneWriterGuard` holds the group to it. Before this member
plans its first batch, and again whenever it has rejoined under a new member id (it was out
of the group, and another may have started meanwhile), it asks the group's coordinator who
the members are. Alone, it goes on. With others, it waits for them to leave (a killed
member's session ends within ``session.timeout.ms``), then raises
:class:`~spark_groups.errors.OneWriterError` having read and written nothing.

Of two members, the one that comes second is refused: the first planned its batches while
it was alone, and a member's first assignment comes from a generation that holds every
member that joined before it. docs/storage.md, "One writer".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from spark_groups.errors import OneWriterError
from spark_groups.group.member import GroupMember
from spark_groups.group.member.coordinator_view import admin_for

log = logging.getLogger(__name__)

#: librdkafka's default ``session.timeout.ms``: how long a killed member stays in the group.
DEFAULT_SESSION_TIMEOUT_MS = 45_000
#: What the wait adds to the session timeout: the coordinator's own check of expired sessions.
MARGIN_S = 5.0


class OneWriterGuard:
    """Holds a group whose ``tables`` (paths) are committed to under ``opt_in`` to one
    member; ``config`` is the member's librdkafka configuration. Owner: Spark's thread."""

    def __init__(self, tables: Sequence[str], opt_in: str, config: Mapping[str, Any]) -> None:
        self.tables = tuple(tables)
        self.opt_in = opt_in
        self._config = config
        self._group = str(config.get("group.id", ""))
        session_ms = int(config.get("session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
        self.bound_s = session_ms / 1000.0 + MARGIN_S
        self._alone_as: str | None = None

    def check(self, member: GroupMember) -> None:
        """Return once ``member`` is the group's only member (at once when it was, under its
        current member id); raise :class:`OneWriterError` when others stay past
        :attr:`bound_s`."""
        me = member.member_id
        if me == self._alone_as:
            return
        admin = admin_for(self._config)
        started = time.monotonic()
        others = self._others(admin, me)
        if others:
            log.warning(
                "consumer group %s: %s are committed to under %s=true (one writer only) and "
                "the group has other members (%s); waiting up to %.0f s for them to leave",
                self._group, ", ".join(self.tables), self.opt_in, ", ".join(others),
                self.bound_s,
            )  # fmt: skip
        while others:
            waited = time.monotonic() - started
            if waited >= self.bound_s:
                raise OneWriterError(self._group, self.tables, self.opt_in, others, waited)
            member.check()
            time.sleep(0.5)  # the next look at the group
            others = self._others(admin, me)
        self._alone_as = me

    def _others(self, admin: Any, me: str) -> list[str]:
        """The group's members other than ``me``, as ``client.id@host``. An unanswered
        DescribeGroups counts as one unknown member: never write on a guess."""
        try:
            group = admin.describe_consumer_groups([self._group])[self._group].result(10)
        except Exception as exc:
            log.debug("could not describe group %s: %s", self._group, exc)
            return ["(the group could not be described)"]
        return sorted(f"{m.client_id}@{m.host}" for m in group.members if m.member_id != me)


def guard_for(
    tables: Mapping[str, str | None], storage_options: Mapping[str, str], config: Mapping[str, Any]
) -> OneWriterGuard | None:
    """The guard of a member whose ``tables`` (option name to path, None: not given) include
    one committed to as check-then-rename; None when every one is safe for many writers."""
    from spark_groups.storage.object_stores import one_writer_opt_in

    found = {
        f"{option} {path}": opt_in
        for option, path in tables.items()
        if path is not None and (opt_in := one_writer_opt_in(path, storage_options)) is not None
    }
    if not found:
        return None
    return OneWriterGuard(sorted(found), sorted(set(found.values()))[0], config)
