"""One attempt at a batch's Delta commit, on the snapshot its decision was made on.

The decision's files and one transaction id per partition written go into one ``append``
commit carrying the batch's commit info (:data:`COMMIT_INFO_KEYS`; the transaction versions
as ``userMetadata``). delta-rs fails it with ``CommitFailedError`` when a commit after the
snapshot set one of those ids (a conflict: the caller decides again) and rebases it over
others. Any other error is resolved by reading the table back (:meth:`CommitAttempt.landed`):
landed is success, not landed a :class:`~spark_groups.errors.SinkError`, unreadable a
:class:`CommitUnknownError`, after which the batch's files must stay in place.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from spark_groups.errors import SinkError
from spark_groups.offsets import TopicPartition
from spark_groups.sink.claim_tokens import claim_app_id
from spark_groups.sink.decision import BatchDecision
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.sink_table import SinkTable, app_id, append_files, referenced, versions
from spark_groups.storage.files import location

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How many commits after its snapshot a commit's version is looked for.
SEARCHED_COMMITS = 50

#: Keys of the commit info (``commitInfo``) every sink commit carries.
COMMIT_INFO_KEYS = (
    "spark_groups.batch",
    "spark_groups.group",
    "spark_groups.member",
    "spark_groups.ranges",
    "spark_groups.dropped",
    "spark_groups.outside",
)

#: What an attempt that did not raise came to: committed; a concurrent commit of the same
#: partitions or claims; or an error after which the commit is certainly not in the table
#: (a storage error, a log listed while another writer's commit appeared: worth deciding
#: again on a fresh snapshot, :attr:`CommitAttempt.last_error` says what).
Outcome = Literal["ok", "conflict", "failed"]


class CommitUnknownError(SinkError):
    """A commit failed in a way that leaves it unknown whether it landed."""


@dataclass
class CommitAttempt:
    """Commits batch decisions to ``table`` as ``member`` of the consumer group
    ``group_id`` (whose transaction ids the commits set)."""

    table: SinkTable
    group_id: str
    member: str
    #: The error of the last attempt that came to "failed".
    last_error: str = ""

    def attempt(
        self,
        snapshot: DeltaTable,
        plan: BatchPlan,
        decision: BatchDecision,
        partition_by: tuple[str, ...],
    ) -> Outcome:
        """Commit ``decision`` on ``snapshot``, the version it was made on: "ok", or
        "conflict" when a concurrent commit got in the way. Raises
        :class:`~spark_groups.errors.SinkError` when the commit certainly failed,
        :class:`CommitUnknownError` when that cannot be told."""
        from deltalake import Transaction
        from deltalake.exceptions import CommitFailedError

        table_id = str(snapshot.metadata().id)
        txns = [
            Transaction(app_id(table_id, self.group_id, tp), until)
            for tp, until in sorted(decision.txns.items())
        ]
        # The claim again, unchanged: a claim or release after the snapshot conflicts.
        txns += [
            Transaction(claim_app_id(table_id, self.group_id, tp), token)
            for tp, token in sorted(decision.claims.items())
        ]
        try:
            append_files(snapshot, decision.keep, partition_by, txns, self.info(plan, decision))
        except CommitFailedError:
            return "conflict"
        except Exception as exc:
            landed = self.landed(decision)
            if landed:
                log.warning(
                    "sink %s: batch %d: the commit reported %s: %s, but it is in the table",
                    self.table.path,
                    plan.batch_id,
                    type(exc).__name__,
                    exc,
                )
                return "ok"
            if landed is None:
                raise CommitUnknownError(
                    f"sink {self.table.path}: batch {plan.batch_id}: the commit failed "
                    f"({type(exc).__name__}: {exc}) and the table cannot be read to tell whether "
                    "it landed; its files were left in place"
                ) from exc
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "sink %s: batch %d: the commit failed and is not in the table: %s",
                self.table.path,
                plan.batch_id,
                self.last_error,
            )
            return "failed"
        return "ok"

    def info(self, plan: BatchPlan, decision: BatchDecision) -> dict[str, str]:
        """The commit info of ``decision``'s commit: :data:`COMMIT_INFO_KEYS`, the
        transaction versions as ``userMetadata`` (see :func:`txns_text`) and, when some were
        left out for their claim, ``spark_groups.fenced``."""
        info = {
            "spark_groups.batch": str(plan.batch_id),
            "spark_groups.group": self.group_id,
            "spark_groups.member": self.member,
            "spark_groups.ranges": json.dumps(
                {
                    topic: {p: [r.from_offset, r.until_offset] for p, r in parts.items()}
                    for topic, parts in _by_topic(decision.written).items()
                },
                separators=(",", ":"),
            ),
            "spark_groups.dropped": json.dumps([str(tp) for tp in decision.dropped]),
            "spark_groups.outside": json.dumps(
                {
                    topic: {p: [v, until, by] for p, (v, until, by) in parts.items()}
                    for topic, parts in _by_topic(decision.outside).items()
                },
                separators=(",", ":"),
            ),
            "userMetadata": txns_text(self.group_id, decision.txns),
        }
        if decision.fenced:
            info["spark_groups.fenced"] = json.dumps([str(tp) for tp in decision.fenced])
        return info

    def landed(self, decision: BatchDecision) -> bool | None:
        """Whether the commit of ``decision`` is in the table (None: cannot tell; loading the
        table is itself tried :data:`~spark_groups.storage.delta.OPEN_ATTEMPTS` times)."""
        try:
            table = self.table.load()
            if table is None:
                return False
            if decision.keep:
                return bool(referenced(table, [decision.keep[0].path]))
            found = versions(table, self.group_id, decision.txns, self.table.storage_options)
            return all(found.get(tp) == until for tp, until in decision.txns.items())
        except Exception as exc:
            log.warning("sink %s: cannot read the table back: %s", self.table.path, exc)
            return None

    def version_of(
        self, plan: BatchPlan, decision: BatchDecision, snapshot: DeltaTable | None = None
    ) -> int | None:
        """The table version of the commit just made (found by its commit info; None if it
        cannot be found among the last few commits). ``snapshot``: the one it was made on.
        The commit is one of the first versions after it: their log entries are read in
        order (the next one, most often; a few more when other members committed in
        between), without touching ``snapshot`` (which may be one kept for later batches);
        past :data:`SEARCHED_COMMITS` of them a fresh load's history is searched."""
        info = self.info(plan, decision)
        try:
            if snapshot is not None:
                found = version_after(self.table, snapshot, info, COMMIT_INFO_KEYS)
                if found is not None:
                    return found
            table = self.table.load()
            if table is None:
                return None
            for entry in table.history(SEARCHED_COMMITS):
                if all(entry.get(k) == info[k] for k in COMMIT_INFO_KEYS):
                    return int(entry["version"])
        except Exception as exc:
            log.debug("sink %s: cannot find the commit's version: %s", self.table.path, exc)
        return None


def version_after(
    table: SinkTable, snapshot: DeltaTable, info: Mapping[str, str], keys: Iterable[str]
) -> int | None:
    """The version of the first commit after ``snapshot`` whose commit info has ``info``'s
    values under ``keys``, among the next :data:`SEARCHED_COMMITS`; None when not there.
    Their log entries are read in order, ``snapshot`` untouched (it may be kept for later)."""
    where = location(table.uri, table.storage_options)
    first = snapshot.version() + 1
    for version in range(first, first + SEARCHED_COMMITS):
        try:
            text = where.read_text(where.child(f"_delta_log/{version:020d}.json"))
        except FileNotFoundError:
            return None
        line = next((x for x in text.splitlines() if x.startswith('{"commitInfo"')), "")
        commit = json.loads(line)["commitInfo"] if line else {}
        if commit and all(commit.get(k) == info[k] for k in keys):
            return version
    return None


def txns_text(group_id: str, txns: Mapping[TopicPartition, int]) -> str:
    """The commit's transaction versions as Delta's ``userMetadata``, which delta-spark's
    ``history()`` shows: ``{"group": g, "txns": {topic: {partition: next offset}}}``."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp, until in sorted(txns.items()):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = until
    return json.dumps({"group": group_id, "txns": by_topic}, separators=(",", ":"))


def _by_topic(ranges: Mapping[TopicPartition, T]) -> dict[str, dict[str, T]]:
    out: dict[str, dict[str, T]] = {}
    for tp in sorted(ranges):
        out.setdefault(tp.topic, {})[str(tp.partition)] = ranges[tp]
    return out
