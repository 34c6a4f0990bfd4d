"""``python -m bench.repro.tansu_leader``: run one scenario, print one line per new member.

Exits 1 when a member that joined after the leader left got no assignment within ``--cap``
seconds; it keeps watching up to ``--watch`` seconds to show when (whether) one came.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.repro.tansu_leader.scenario import ORDERS, Scenario


@contextlib.contextmanager
def broker(kind: str, servers: str | None) -> Iterator[str]:
    """The bootstrap servers: the given ones, or a broker started here for the run."""
    if servers:
        yield servers
        return
    if kind == "tansu":
        from spark_groups.embedded import EmbeddedBroker as Broker
    else:
        from spark_groups.tools.kafka_broker import KafkaBroker as Broker
    with Broker() as started:
        yield started.bootstrap_servers


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m bench.repro.tansu_leader", description=__doc__)
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu")
    parser.add_argument(
        "--order",
        choices=list(ORDERS),
        default="restart_then_leave",
        help="; ".join(f"{k}: {v}" for k, v in ORDERS.items()),
    )
    parser.add_argument(
        "--leaver",
        choices=["group", "kafka-python"],
        default="group",
        help="the leader that leaves: a spark_groups GroupMember, or a kafka-python consumer",
    )
    parser.add_argument("--assignor", default="cooperative-sticky", help="every member's")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument(
        "--cap", type=float, default=30.0, help="seconds within which a new member must be assigned"
    )
    parser.add_argument(
        "--watch", type=float, default=90.0, help="seconds to watch for a late assignment"
    )
    parser.add_argument("--servers", help="use this broker instead of starting one")
    parser.add_argument("--logs", type=Path, help="log folder (default: a new temp folder)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the scenario; 1 when a new member got no assignment within the cap."""
    args = parse(argv)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="tansu-leader-"))
    with broker(args.broker, args.servers) as servers:
        scenario = Scenario(
            servers,
            logs,
            order=args.order,
            leaver=args.leaver,
            assignor=args.assignor,
            session_ms=args.session_ms,
            cap_s=args.cap,
            watch_s=args.watch,
        )
        outcomes = scenario.run()
        del scenario  # its clients go before the broker does
    label = f"{args.broker} {args.order} leaver={args.leaver} session={args.session_ms}ms"
    for outcome in outcomes:
        print(f"{label} {outcome.line(args.cap, args.watch)}")
    print(f"logs: {logs}")
    return 1 if any(o.late(args.cap) for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
