"""The scenario: a steady group of three members, then two restart while the leader leaves.

The leader is the member that joined first (``L``). ``m1`` and ``m2`` join after it; once
both have partitions, the scenario's *order* makes them restart (``m1b``, ``m2b``) and ``L``
leave, and records how long each new member waits for its first assignment.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

#: What happens once the group is steady, and the leader is ``L``:
ORDERS = {
    "restart_then_leave": "m1, m2 leave and rejoin as m1b, m2b; 1 s later L leaves",
    "leave_then_restart": "L leaves; then m1, m2 leave and rejoin as m1b, m2b",
    "all_at_once": "L, m1, m2 leave together; m1b, m2b join",
    "leave_mid_join": "m1, m2 leave and rejoin; L leaves a quarter session later",
    "no_leave": "no L: m1, m2 leave and rejoin (on Tansu the same hang when the leader's "
    "LeaveGroup is handled second)",
}
#: The repository's root, so that members run with the same code as the scenario.
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Outcome:
    """A new member's first assignment: seconds after it started, or None within the cap."""

    name: str
    seconds: float | None
    generation: str = ""
    partitions: str = ""
    #: Whom the member's JoinGroup responses named leader (see Scenario.leaders_seen).
    leaders: str = ""

    def late(self, cap_s: float) -> bool:
        """No assignment within ``cap_s`` seconds."""
        return self.seconds is None or self.seconds > cap_s

    def line(self, cap_s: float, watch_s: float) -> str:
        """One line for the report."""
        if self.seconds is None:
            return (
                f"{self.name}: NO ASSIGNMENT within {watch_s:.0f} s (cap {cap_s:.0f} s); "
                f"JoinGroup leaders: {self.leaders}"
            )
        verdict = "LATE, " if self.late(cap_s) else ""
        return (
            f"{self.name}: {verdict}assigned after {self.seconds:.1f} s (cap {cap_s:.0f} s), "
            f"generation {self.generation}, partitions {self.partitions or '(none)'}; "
            f"JoinGroup leaders: {self.leaders}"
        )


class Member:
    """One member process; its stdout and stderr go to files in the log folder."""

    def __init__(self, name: str, kind: str, args: list[str], logs: Path) -> None:
        self.name = name
        self.out = logs / f"{name}.out"
        with self.out.open("w") as out, (logs / f"{name}.err").open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench.repro.tansu_leader.member", kind, *args],
                cwd=ROOT,
                stdout=out,
                stderr=err,
            )

    def assigned(self) -> list[str] | None:
        """The fields of the ``ASSIGNED`` line (seconds, generation, [partitions], member id),
        once there is one."""
        for line in self.out.read_text().splitlines():
            if line.startswith("ASSIGNED "):
                return line.split(" ")[1:]
        return None

    def leaders(self) -> list[str]:
        """The LeaderId of each JoinGroup response this member got (librdkafka's cgrp debug)."""
        err = self.out.with_suffix(".err")
        return re.findall(r"JoinGroup response: .*?LeaderId (\S*?)(?: \(me\))?,", err.read_text())

    def leave(self) -> None:
        """SIGTERM: the member closes, which sends LeaveGroup."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 40.0) -> None:
        """Wait for the process to end; kill it past ``timeout_s``."""
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Scenario:
    """One run of one order on one broker (``servers``); its events go to ``logs``."""

    def __init__(
        self,
        servers: str,
        logs: Path,
        *,
        order: str,
        leaver: str = "group",
        assignor: str = "cooperative-sticky",
        session_ms: int = 6000,
        cap_s: float = 30.0,
        watch_s: float = 90.0,
    ) -> None:
        self.servers, self.logs, self.order, self.leaver = servers, logs, order, leaver
        self.assignor, self.session_ms = assignor, session_ms
        self.cap_s, self.watch_s = cap_s, max(cap_s, watch_s)
        self.topic = f"t-{uuid.uuid4().hex[:6]}"
        self.group = f"g-{uuid.uuid4().hex[:6]}"
        self.admin = AdminClient({"bootstrap.servers": servers})
        self.members: dict[str, Member] = {}
        self.started = time.monotonic()
        logs.mkdir(parents=True, exist_ok=True)
        self._events = (logs / "events.txt").open("w")

    def event(self, message: str) -> None:
        """A timestamped line in events.txt."""
        self._events.write(f"+{time.monotonic() - self.started:6.1f}s {message}\n")
        self._events.flush()

    def describe(self) -> str:
        """The group's state as DescribeGroups reports it."""
        try:
            future = self.admin.describe_consumer_groups([self.group], request_timeout=5)
            group = future[self.group].result(timeout=10)
            return f"{group.state.name} members={len(group.members)}"
        except Exception as exc:  # a diagnosis only
            return f"not described: {exc}"

    def spawn(self, name: str, kind: str = "group") -> Member:
        """Start a member named ``name``."""
        args = [self.servers, self.topic, self.group, str(self.session_ms), self.assignor]
        self.members[name] = Member(name, kind, args, self.logs)
        self.event(f"start {name} ({kind})")
        return self.members[name]

    def leave(self, *names: str) -> None:
        """Make members leave (LeaveGroup) and wait until their processes ended."""
        for name in names:
            self.members[name].leave()
            self.event(f"SIGTERM {name}")
        for name in names:
            self.members[name].wait()
            self.event(f"{name} ended")

    def wait_assigned(self, names: list[str]) -> dict[str, Outcome]:
        """Watch each member's first assignment (up to ``watch_s``); DescribeGroups every 5 s."""
        deadline = time.monotonic() + self.watch_s + 2
        describe_at = 0.0
        outcomes: dict[str, Outcome] = {}
        while time.monotonic() < deadline and len(outcomes) < len(names):
            for name in names:
                fields = self.members[name].assigned()
                if name not in outcomes and fields:
                    outcomes[name] = Outcome(name, float(fields[0]), fields[1], fields[2][1:-1])
            if time.monotonic() >= describe_at:
                self.event(f"describe: {self.describe()}")
                describe_at = time.monotonic() + 5
            time.sleep(0.5)
        return {name: outcomes.get(name, Outcome(name, None)) for name in names}

    def setup(self) -> None:
        """A topic of 4 partitions with 40 records."""
        self.admin.create_topics([NewTopic(self.topic, 4, 1)])[self.topic].result(20)
        producer = Producer({"bootstrap.servers": self.servers})
        for i in range(40):
            producer.produce(self.topic, str(i).encode(), partition=i % 4)
        producer.flush(10)
        del producer  # no reconnect noise once the broker is gone
        self.event(f"topic {self.topic}, group {self.group}, order {self.order}")

    def run(self) -> list[Outcome]:
        """Run the order; the outcomes of the members that joined after the steady state."""
        self.setup()
        with self._cleanup():
            if self.order != "no_leave":
                self.spawn("L", self.leaver)
                time.sleep(2)  # L joins first: it is the leader
            self.spawn("m1")
            self.spawn("m2")
            steady = self.wait_assigned(["m1", "m2"])
            self.event(f"steady: {[o.line(self.cap_s, self.watch_s) for o in steady.values()]}")
            time.sleep(3)  # the cooperative protocol's second round
            self.event(f"steady describe: {self.describe()}")
            self._act()
            outcomes = self.wait_assigned(["m1b", "m2b"])
            for outcome in outcomes.values():
                outcome.leaders = self.leaders_seen(outcome.name)
                self.event(outcome.line(self.cap_s, self.watch_s))
            return list(outcomes.values())

    def leaders_seen(self, name: str) -> str:
        """Who the JoinGroup responses to member ``name`` named leader, by member name, with
        how many times in a row: ``L x5, m1b x1``."""
        ids = {}
        for other, member in self.members.items():
            fields = member.assigned()
            if fields and len(fields) > 3:
                ids[fields[3]] = other
        runs: list[list] = []
        for leader in self.members[name].leaders():
            who = ids.get(leader, leader or "(none)")
            if runs and runs[-1][0] == who:
                runs[-1][1] += 1
            else:
                runs.append([who, 1])
        return ", ".join(f"{who} x{n}" for who, n in runs) or "(no JoinGroup response logged)"

    def _act(self) -> None:
        def restart() -> None:
            self.leave("m1", "m2")
            self.spawn("m1b")
            self.spawn("m2b")

        if self.order == "restart_then_leave":
            restart()
            time.sleep(1)
            self.members["L"].leave()
        elif self.order == "leave_then_restart":
            self.leave("L")
            restart()
        elif self.order == "all_at_once":
            self.leave("L", "m1", "m2")
            self.spawn("m1b")
            self.spawn("m2b")
        elif self.order == "leave_mid_join":
            restart()
            time.sleep(self.session_ms / 4000)
            self.members["L"].leave()
        elif self.order == "no_leave":
            restart()
        else:
            raise ValueError(f"unknown order {self.order!r}: one of {', '.join(ORDERS)}")
        self.event(f"acted: {ORDERS[self.order]}")

    @contextlib.contextmanager
    def _cleanup(self) -> Iterator[None]:
        try:
            yield
        finally:
            live = [n for n, m in self.members.items() if m.process.poll() is None]
            self.leave(*live)
            self.event(f"after: {self.describe()}")
            self._events.close()
            del self.admin
