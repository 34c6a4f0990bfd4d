"""An at-least-once sink for the chaos test: a plain consumer-group member, as a process.

    python alo_consumer.py SERVERS TOPIC GROUP OUT_FILE

Appends every record's value (an id) to OUT_FILE, one a line, fsyncs, and only then commits
the offsets: a kill between the two makes the next owner read those records again
(duplicates), never lose them. Runs until SIGTERM (leaves the group) or SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys

from confluent_kafka import Consumer, KafkaException


def main() -> int:
    servers, topic, group, out_path = sys.argv[1:5]
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    try:
        consumer.subscribe([topic])
        with open(out_path, "a") as out:
            while not stop:
                msgs = [m for m in consumer.consume(500, 0.5) if m.error() is None]
                if not msgs:
                    continue
                out.write("".join(m.value().decode() + "\n" for m in msgs))
                out.flush()
                os.fsync(out.fileno())
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:  # e.g. revoked meanwhile: read again, no loss
                    sys.stderr.write(f"commit failed: {exc}\n")
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
