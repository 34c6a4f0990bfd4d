"""Claims: which member may still write a partition into the sink's table (a fencing token).

A claim is one more Delta transaction id per partition and group (:func:`claim_app_id`), its
version the claim token of the member that owns the partition (:data:`RELEASED`: none).
1. A member resuming partitions sets their claims to a fresh token (:func:`claim`) and reads
their positions in the same snapshot. 2. The sink writes a partition only while the table's
claim is the batch's token, and sets it again with its commit, so a later claim or release
makes the sink's commit conflict and decide again. 3. A member giving partitions up while a
batch may be in flight sets them to :data:`RELEASED`, compare-and-set on its own tokens
(:func:`release`): the positions read there are final. A partition with no claim accepts any
batch; plain consumers claim through ``spark_groups.handover``. docs/sink.md, "Claims: who may
still write a partition".
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from spark_groups.errors import SinkClaimError
from spark_groups.group.arbiter import Claimed
from spark_groups.offsets import TopicPartition, positions_text
from spark_groups.sink.sink_table import SinkTable, append_files, versions
from spark_groups.storage.transactions import transaction_versions

if TYPE_CHECKING:
    from deltalake import DeltaTable

# Logs under the logger it has always used (before the module's rename).
log = logging.getLogger("spark_groups.sink.claims")

#: Prefix of the claims' Delta transaction app ids.
CLAIM_PREFIX = "spark_groups.claim"
#: The claim of a partition its last owner gave up.
RELEASED = 0
#: How long a claim or release keeps trying against concurrent commits, by default.
DEFAULT_TIMEOUT_S = 15.0
#: How many newer commits delta-rs may rebase one claim or release over before it gives up
#: (its default, 15, is too few beside a big group's commits: docs/history.md, "A big
#: group's rolling restart"). A claim adds no files and conflicts only with a commit that
#: sets the same claims or positions, so rebasing is always right.
COMMIT_RETRIES = 200


def claim_app_id(table_id: str, group_id: str, tp: TopicPartition) -> str:
    """The Delta transaction app id of the claim on one partition of one group."""
    return f"{CLAIM_PREFIX}:{table_id}:{tp.topic}:{tp.partition}:{group_id}"


def new_token() -> int:
    """A fresh claim token: positive, random, never :data:`RELEASED`."""
    return secrets.randbits(62) + 1


def claims_of(
    table: DeltaTable,
    group_id: str,
    partitions: Iterable[TopicPartition],
    storage_options: Mapping[str, str] | None = None,
) -> dict[TopicPartition, int]:
    """The claim token of ``group_id`` on each partition in the snapshot ``table`` (its
    ``storage_options``: as :func:`spark_groups.sink.sink_table.versions`); partitions never
    claimed are absent."""
    table_id = str(table.metadata().id)
    ids = {claim_app_id(table_id, group_id, tp): tp for tp in partitions}
    found = transaction_versions(table, ids, storage_options)
    return {ids[a]: v for a, v in found.items()}


def claim(
    path: str,
    group_id: str,
    partitions: Iterable[TopicPartition],
    token: int,
    *,
    storage_options: Mapping[str, str] | None = None,
    member: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Claimed | None:
    """Step 1: set the claim of every partition in ``partitions`` to ``token``, whoever held
    it (the group gave them to this member). None when the table does not exist yet.

    Raises :class:`~spark_groups.errors.SinkClaimError` when it could not commit in
    ``timeout_s``."""
    wanted = sorted(set(partitions))
    return _change(
        path,
        group_id,
        {tp: token for tp in wanted},
        expect=None,
        what="claim",
        storage_options=storage_options,
        member=member,
        timeout_s=timeout_s,
    )


def release(
    path: str,
    group_id: str,
    tokens: Mapping[TopicPartition, int],
    *,
    storage_options: Mapping[str, str] | None = None,
    member: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Claimed | None:
    """Step 3: set the claim of each partition still held with its token in ``tokens`` to
    :data:`RELEASED`; return the positions the table holds for them, final for every batch
    planned under those tokens. None when the table does not exist.

    Raises :class:`~spark_groups.errors.SinkClaimError` when it could not commit in
    ``timeout_s``."""
    return _change(
        path,
        group_id,
        {tp: RELEASED for tp in tokens},
        expect=dict(tokens),
        what="release",
        storage_options=storage_options,
        member=member,
        timeout_s=timeout_s,
    )


def _change(
    path: str,
    group_id: str,
    new: Mapping[TopicPartition, int],
    *,
    expect: Mapping[TopicPartition, int] | None,
    what: str,
    storage_options: Mapping[str, str] | None,
    member: str,
    timeout_s: float,
) -> Claimed | None:
    """One commit setting the claims ``new`` (only where the table holds ``expect``'s token,
    when given), on the snapshot whose positions it returns; again on a conflict."""
    from deltalake import Transaction
    from deltalake.exceptions import CommitFailedError

    options = dict(storage_options) if storage_options else None
    table = SinkTable(path, options)
    deadline = time.monotonic() + timeout_s
    attempt = 0
    last_error: Exception | None = None
    while True:
        attempt += 1
        try:
            snapshot = table.latest()  # kept open: reads only the commits since the last
            if snapshot is None:
                return None
            held = claims_of(snapshot, group_id, new, options)
            mine = {
                tp: token
                for tp, token in new.items()
                if expect is None or held.get(tp) == expect[tp]
            }
            not_mine = tuple(sorted(tp for tp in new if tp not in mine))
            positions = versions(snapshot, group_id, mine, options)
            if not mine:
                return Claimed(snapshot.version(), positions, not_mine)
            table_id = str(snapshot.metadata().id)
            txns = [Transaction(claim_app_id(table_id, group_id, tp), t) for tp, t in mine.items()]
            # Keys of its own (not the sink's ``spark_groups.member``): readers of the sink's
            # commits (history, describe) must not take a claim for a batch.
            info = {
                "spark_groups.claims.group": group_id,
                "spark_groups.claims.by": member,
                f"spark_groups.claims.{what}": ",".join(str(tp) for tp in sorted(mine)),
            }
            partition_by = tuple(snapshot.metadata().partition_columns)
            append_files(snapshot, [], partition_by, txns, info, max_commit_retries=COMMIT_RETRIES)
            version = snapshot.version()
            log.info(
                "sink %s: %s of %d partition(s) after version %s (positions %s)%s",
                path,
                what,
                len(mine),
                version,
                positions_text(positions) or "none",
                "; claimed by another owner meanwhile: "
                + ", ".join(str(tp) for tp in sorted(not_mine))
                if not_mine
                else "",
            )
            return Claimed(version, positions, not_mine)
        except CommitFailedError as exc:  # a concurrent commit of the same claims or positions
            last_error = exc
        except Exception as exc:  # the table could not be read or written: try again
            last_error = exc
        if time.monotonic() >= deadline:
            raise SinkClaimError(
                f"sink {path}: could not {what} partitions {[str(tp) for tp in sorted(new)]} of "
                f"group {group_id} in {timeout_s:.0f} s ({attempt} attempts; last: "
                f"{type(last_error).__name__}: {last_error})",
                path=path,
                partitions=new,
            )
        time.sleep(random.uniform(0.0, min(0.5, 0.01 * 2**attempt)))
