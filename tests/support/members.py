"""The member programs of the tests and the benchmarks, on the one launcher
(:class:`support.launch.MemberProcess`):

* :class:`Member`: a group member writing one sink table, ``programs/sink_member.py`` (its own
  Spark application) or ``programs/sim_member.py`` (the product without Spark), run with a
  spec; :func:`member_spec` makes the spec the members of one group share, and
  :func:`stop_all` stops them the way they watch for it;
* :class:`AloConsumer`: ``programs/alo_consumer.py``, the chaos test's at-least-once consumer.

``programs/frozen_member.py`` (the fencing tests) runs as a plain :class:`MemberProcess`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from support.launch import PROGRAMS, MemberProcess
from support.tables import sink_commits

SINK_MEMBER = PROGRAMS / "sink_member.py"
SIM_MEMBER = PROGRAMS / "sim_member.py"
FROZEN_MEMBER = PROGRAMS / "frozen_member.py"
ALO_CONSUMER = PROGRAMS / "alo_consumer.py"


class Member(MemberProcess):
    """One member of a group: ``program`` (:data:`SINK_MEMBER` unless given) run with
    ``spec`` and its name as ``member`` (the spec as it is at each start)."""

    def __init__(self, name: str, spec: dict, logs: Path, program: Path = SINK_MEMBER) -> None:
        super().__init__(name, program, logs)
        self.spec = spec

    def arguments(self) -> list[str]:
        return [json.dumps({**self.spec, "member": self.name})]

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the member to stop the way it watches for it (``spec["stop_file"]``), wait for
        it to exit, then SIGKILL whatever is left of its process group."""
        try:
            if self.running:
                Path(self.spec["stop_file"]).touch()
                self.wait(timeout_s)
        finally:
            self.kill()
            self.reap()

    def commits(self, table: Path | str, storage_options: Mapping[str, str] | None = None) -> int:
        """How many sink commits of ``table`` are this member's."""
        commits = sink_commits(table, storage_options)
        return sum(1 for c in commits if c["spark_groups.member"] == self.name)


def member_spec(
    servers: str, topic: str, group: str, tmp_path: Path, trigger: str
) -> tuple[dict, Path, Path]:
    """The spec shared by the member processes of one test (each adds its ``checkpoint``),
    the folder of their logs (created) and the file whose existence tells them to stop.
    The sink table is ``tmp_path / "table"``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    stop_file = tmp_path / "stop"
    spec = {
        "servers": servers,
        "topic": topic,
        "group": group,
        "table": str(tmp_path / "table"),
        "ledger": str(tmp_path / "ledger"),
        "stop_file": str(stop_file),
        "trigger": trigger,
    }
    return spec, logs, stop_file


def stop_all(members: Iterable[Member], stop_file: Path, timeout_s: float = 90.0) -> None:
    """Ask every member to stop the way its program watches for it (``stop_file``) and wait
    for each to exit; :class:`AssertionError` with the member's log when one exits with an
    error or does not exit in time."""
    stop_file.touch()
    for member in members:
        code = member.wait(timeout_s)
        assert code == 0, f"{member.name} exited with {code}: {member.log_text()[-3000:]}"


class AloConsumer(MemberProcess):
    """The at-least-once consumer process of the chaos test; each run appends to a file of
    its own (``alo-RUN.txt`` in ``out_dir``, beside its log)."""

    def __init__(self, servers: str, topic: str, group: str, out_dir: Path) -> None:
        super().__init__("alo", ALO_CONSUMER, out_dir, [servers, topic, group])

    def arguments(self) -> list[str]:
        return [*self.args, str(self.logs / f"alo-{self.runs}.txt")]

    def ids(self) -> list[int]:
        """Every id any run wrote (duplicates kept)."""
        out: list[int] = []
        for path in self.logs.glob("alo-*.txt"):
            out.extend(int(line) for line in path.read_text().split("\n") if line.strip())
        return out
