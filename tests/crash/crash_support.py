"""What the crash-point tests share besides :class:`support.services.PlainService`: a member
that joins the group and leaves."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer

from support.broker import wait_until


def join_and_leave(
    servers: str, topic: str, group: str, settings: dict, done: Callable[[], bool] = bool
) -> None:
    """A consumer that joins the group (with an eager assignor every member's partitions are
    revoked) and leaves once it has an assignment or ``done()`` is true, committing nothing:
    what it fetched meanwhile is dropped and read by the partitions' next owner."""
    joiner = Consumer(
        {"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False, **settings}
    )
    joiner.subscribe([topic])
    try:
        wait_until(
            lambda: joiner.poll(0.1) is not False and (bool(joiner.assignment()) or done()),
            60,
            "the joiner's assignment",
        )
    finally:
        joiner.close()
