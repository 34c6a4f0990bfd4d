"""Who committed an offset: the metadata string of every OffsetCommit the source makes.

Every commit of the ``kafka-group`` source carries a short JSON object (:func:`make`)::

    {"by":"spark_groups","member":"rdkafka-6b1c…","client":"orders-etl-a","what":"batch 7",
     "sink":"/tables/orders"}

It holds ids and the table's path only, never a secret, and stays well under the broker's
``offset.metadata.max.bytes``. A commit whose metadata is not of this form was made by someone
else (a plain consumer, a tool): :func:`read` tells them apart, so a partition that resumes
from another consumer's commit is seen as a handover. The fields: docs/offsets.md, "Who
committed: commit metadata".
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: The value of ``by`` in the metadata of every commit of this library.
OURS = "spark_groups"
#: How many characters of another client's metadata are kept (shown in logs and errors).
SHOWN_CHARS = 80
#: The longest table path recorded: the whole string must stay well under the broker's
#: ``offset.metadata.max.bytes`` (4096 by default), or the commit is refused.
MAX_SINK_CHARS = 1024


def make(member_id: str, what: str, client_id: str = "", sink: str | None = None) -> str:
    """The metadata string of a commit by ``member_id`` (and ``client_id``) for ``what``,
    by a query writing the delta-group table ``sink`` (when it has ``sink.table``)."""
    value = {"by": OURS, "member": member_id, "what": what}
    if client_id:
        value["client"] = client_id
    if sink is not None and len(sink) <= MAX_SINK_CHARS:
        value["sink"] = sink
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class Committer:
    """Who made a commit, as its metadata says. ``ours`` is True for this library's commits;
    ``text`` is a short, printable description (``spark_groups member … (batch 7)``, or
    ``another consumer (metadata '…')``)."""

    ours: bool
    text: str
    #: The delta-group table the committing query writes (spark_groups' commits only).
    sink: str | None = None


def read(metadata: str | None) -> Committer:
    """Who made a commit whose metadata is ``metadata`` (None or "" for none)."""
    if metadata:
        try:
            value = json.loads(metadata)
        except ValueError:
            value = None
        if isinstance(value, dict) and value.get("by") == OURS:
            who = f"spark_groups member {value.get('member', '?')}"
            if value.get("client"):
                who += f" (client {value['client']})"
            sink = value.get("sink")
            return Committer(
                True, f"{who}, {value.get('what', '?')}", sink if isinstance(sink, str) else None
            )
    if not metadata:
        return Committer(False, "another consumer of the group (no commit metadata)")
    shown = "".join(c if c.isprintable() else "?" for c in metadata[:SHOWN_CHARS])
    more = "…" if len(metadata) > SHOWN_CHARS else ""
    return Committer(False, f"another consumer of the group (commit metadata {shown!r}{more})")
