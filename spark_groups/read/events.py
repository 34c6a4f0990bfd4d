"""A chunk's error events, split from its records: end-of-partition and out-of-range events.

``consume()`` hands over error events among the records. Two of them move a range on:
end-of-partition (``enable.partition.eof``: the offsets up to it hold no record a consumer
receives, such as transaction markers and aborted records) and out-of-range (the range's
fetch offset is gone). The others are :meth:`~spark_groups.read.faults.Faults.fetch_error`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from spark_groups.kafka.client import KafkaError, Message
from spark_groups.read.faults import Faults
from spark_groups.read.progress import RangeState

_msg_error = Message.error


@dataclass
class Events:
    """The events of one chunk that matter: end-of-partition offsets and out-of-range
    errors, by range."""

    eof: dict[RangeState, int] = field(default_factory=dict)
    out_of_range: list[RangeState] = field(default_factory=list)


def split_events(
    msgs: list[Message], state_of: Callable[[Message], RangeState | None], faults: Faults
) -> tuple[list[Message], Events]:
    """Separate records from error events (``state_of``: a message's range, if any).

    Returns the records and the events that matter: per range, the highest
    end-of-partition offset reported, and the ranges whose fetch offset the broker said is
    out of range (their records after that event are dropped: the partition is fetched
    again from a new offset). Other events go to ``faults``, which raises or lets them pass.
    """
    good: list[Message] = []
    events = Events()
    out_of_range = events.out_of_range
    for msg, err in zip(msgs, map(_msg_error, msgs), strict=True):
        if err is None:
            if not out_of_range or state_of(msg) not in out_of_range:
                good.append(msg)
            continue
        code = err.code()
        state = state_of(msg)
        if code == KafkaError._PARTITION_EOF:
            if state is not None:
                events.eof[state] = max(events.eof.get(state, 0), msg.offset() or 0)
            continue
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            if state is not None:
                out_of_range.append(state)
            continue
        faults.fetch_error(err, state, msg.topic())
    return good, events
