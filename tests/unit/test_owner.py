"""The owner thread and its request queue, with a stand-in client: no broker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from spark_groups.group.member.owner import OwnerThread

from support.broker import wait_until


class Failed(Exception):
    """The owner's ``error`` factory's exception."""


class Client:
    """Records which threads touched it; only one may ever have."""

    def __init__(self) -> None:
        self.threads: set[int] = set()
        self.steps = 0
        self.closed = False

    def touch(self) -> int:
        self.threads.add(threading.get_ident())
        return len(self.threads)


def owner_of(
    client: Client,
    *,
    setup: Callable[[Client], None] = Client.touch,
    step: Callable[[Client], None] | None = None,
) -> OwnerThread[Client]:
    def default_step(c: Client) -> None:
        c.touch()
        c.steps += 1
        time.sleep(0.005)

    def close(c: Client) -> None:
        c.touch()
        c.closed = True

    return OwnerThread(
        "test-owner",
        "test owner",
        create=lambda: client,
        setup=setup,
        step=step or default_step,
        close=close,
        error=Failed,
        log=logging.getLogger("spark_groups.test"),
    )


@pytest.fixture
def owners() -> Iterator[list[OwnerThread[Client]]]:
    started: list[OwnerThread[Client]] = []
    yield started
    for owner in started:
        owner.stop(10)


def test_calls_from_many_threads_run_on_the_owner_thread_only(owners) -> None:
    client = Client()
    owner = owner_of(client)
    owners.append(owner)
    owner.start(10)
    answers: list[int] = []

    def caller(n: int) -> None:
        for i in range(20):
            answers.append(owner.call(lambda c, i=i: c.touch() * 0 + n * 100 + i, 10))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(answers) == sorted(n * 100 + i for n in range(4) for i in range(20))
    assert len(client.threads) == 1 and threading.get_ident() not in client.threads
    assert client.steps > 0


def test_a_call_raises_the_exception_of_its_function_in_the_callers_thread(owners) -> None:
    owner = owner_of(Client())
    owners.append(owner)
    owner.start(10)

    def boom(c: Client) -> None:
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        owner.call(boom, 10)
    owner.check()  # the owner thread goes on
    assert owner.call(lambda c: "still here", 10) == "still here"


def test_a_step_that_waits_serves_other_threads_and_calls_itself_directly(owners) -> None:
    release = threading.Event()
    waiting = threading.Event()
    inner: list[str] = []

    def step(c: Client) -> None:
        if release.is_set():
            time.sleep(0.005)
            return
        waiting.set()
        inner.append(owner.call(lambda c: "direct", 1))  # on the owner thread: at once
        while not release.is_set():
            owner.serve(0.02)

    owner = owner_of(Client(), step=step)
    owners.append(owner)
    owner.start(10)
    assert waiting.wait(10)
    assert owner.call(lambda c: "served while the step waits", 10) == (
        "served while the step waits"
    )
    release.set()
    assert inner == ["direct"]


def test_serve_returns_after_its_time_with_nothing_queued(owners) -> None:
    served: list[float] = []

    def step(c: Client) -> None:
        if not served:
            started = time.monotonic()
            owner.serve(0.1)
            served.append(time.monotonic() - started)
        time.sleep(0.005)

    owner = owner_of(Client(), step=step)
    owners.append(owner)
    owner.start(10)
    wait_until(lambda: bool(served), 10)
    assert 0.1 <= served[0] < 2


def test_stop_closes_the_client_and_later_calls_are_refused(owners) -> None:
    client = Client()
    owner = owner_of(client)
    owner.start(10)
    assert owner.stop(10)
    assert client.closed and owner.stopped and owner.closing
    assert len(client.threads) == 1  # closed on the owner thread too
    owner.check()  # asked to stop: not a failure
    with pytest.raises(Failed, match="the test owner is closed"):
        owner.call(lambda c: None, 1)
    assert owner.stop(1)  # idempotent


def test_stop_before_start_only_asks(owners) -> None:
    owner = owner_of(Client())
    assert owner.stop(1)
    assert owner.closing and not owner.stopped


def test_stop_from_the_owner_thread_asks_and_returns_at_once(owners) -> None:
    client = Client()
    answered: list[bool] = []

    def stop_here(c: Client) -> None:
        answered.append(owner.stop(30))

    owner = owner_of(client)
    owners.append(owner)
    owner.start(10)
    owner.call(stop_here, 10)
    assert answered == [True]
    wait_until(lambda: owner.stopped, 10)
    assert client.closed


def test_a_failed_setup_is_raised_by_start_and_the_client_still_closed(caplog) -> None:
    client = Client()

    def setup(c: Client) -> None:
        raise ValueError("no such topic")

    owner = owner_of(client, setup=setup)
    with (
        caplog.at_level(logging.ERROR, logger="spark_groups.test"),
        pytest.raises(ValueError, match="no such topic"),
    ):
        owner.start(10)
    assert client.closed and owner.stopped
    assert "test owner could not start: no such topic" in caplog.text
    with pytest.raises(ValueError, match="no such topic"):
        owner.check()


def test_a_failed_step_stops_the_owner_and_queued_calls_get_its_cause(caplog) -> None:
    proceed = threading.Event()

    def step(c: Client) -> None:
        proceed.wait(10)
        raise ValueError("fatal")

    client = Client()
    owner = owner_of(client, step=step)
    owner.start(10)
    outcome: list[BaseException] = []

    def caller() -> None:
        try:
            owner.call(lambda c: None, 10)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    with caplog.at_level(logging.ERROR, logger="spark_groups.test"):
        thread.start()
        wait_until(lambda: not owner._requests.empty(), 10)
        proceed.set()
        thread.join(10)
    assert [str(e) for e in outcome] == ["fatal"]
    assert owner.stopped and client.closed
    assert "test owner failed" in caplog.text
    with pytest.raises(ValueError, match="fatal"):
        owner.check()
    with pytest.raises(ValueError, match="fatal"):
        owner.call(lambda c: None, 1)


def test_fail_records_the_failure_and_stops_after_the_step(owners) -> None:
    go = threading.Event()

    def step(c: Client) -> None:
        if go.wait(0.01):
            owner.fail(Failed("credentials refused"))

    client = Client()
    owner = owner_of(client, step=step)
    owner.start(10)
    go.set()
    wait_until(lambda: owner.stopped, 10)
    assert owner.closing and client.closed
    with pytest.raises(Failed, match="credentials refused"):
        owner.check()


def test_start_gives_up_after_its_timeout(owners) -> None:
    release = threading.Event()
    owner = owner_of(Client(), setup=lambda c: release.wait(10) and None)
    owners.append(owner)
    with pytest.raises(Failed, match="the test owner did not start in time"):
        owner.start(0.1)
    release.set()
    owner.start(1)  # started already: nothing to do


def test_a_call_that_gets_no_answer_in_time_is_an_error(owners) -> None:
    release = threading.Event()

    def step(c: Client) -> None:
        release.wait(10)

    owner = owner_of(Client(), step=step)
    owners.append(owner)
    owner.start(10)
    try:
        with pytest.raises(Failed, match="the test owner did not answer within 0 s"):
            owner.call(lambda c: None, 0.1)
    finally:
        release.set()


def test_the_first_failure_is_the_one_start_raises() -> None:
    """Setting the member up fails (a refused READ), and closing the client reports another
    error through a callback (librdkafka called the SASL handshake it tore down refused
    credentials): ``start()`` raises the first, the cause (test_sasl_acl failed on the
    second, once)."""
    client = Client()
    owner: OwnerThread[Client]

    def refused(c: Client) -> None:
        raise Failed("not authorized to READ the topic")

    def close(c: Client) -> None:
        owner.fail(Failed("SASL handshake failed"))  # as error_cb, from inside close()
        c.closed = True

    owner = OwnerThread(
        "test-owner", "test owner", create=lambda: client, setup=refused,
        step=Client.touch, close=close, error=Failed, log=logging.getLogger("spark_groups.test"),
    )  # fmt: skip
    with pytest.raises(Failed, match="not authorized to READ"):
        owner.start(10)
    assert client.closed
    assert str(owner.failure) == "not authorized to READ the topic"
