"""A driver-side member in its own process, for the fencing test (no Spark).

    python frozen_member.py SERVERS TOPIC GROUP LEDGER

Plans batch 0, prints ``PLANNED``, waits for a line on stdin (the test freezes and thaws it
meanwhile), then reaches the safe point for batch 0 and prints its metrics as JSON.
"""

from __future__ import annotations

import json
import sys
import time

from spark_groups.group.stream import GroupStream
from spark_groups.offsets import BatchOffset
from spark_groups.options import parse_options


def main() -> None:
    servers, topic, group, ledger = sys.argv[1:5]
    options = parse_options(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "group.id": group,
            "offsets.table": ledger,
            "startingOffsets": "earliest",
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "500",
        }
    )
    stream = GroupStream(options)
    planned = stream.latest_offset(BatchOffset.initial().to_json(), None)
    print("PLANNED", json.dumps(planned), flush=True)
    sys.stdin.readline()
    # Let librdkafka notice, after the thaw, that the session expired. Kafka would refuse
    # the stale commit by its generation anyway; the embedded broker accepts commits from
    # expired members (docs/brokers.md), so there only the loss keeps it out.
    deadline = time.monotonic() + 15
    while stream.metrics.lost_partitions == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    stream.latest_offset(planned, None)  # the safe point for batch 0: would commit it
    member = stream.ensure_started()
    print(
        "RESULT",
        json.dumps(
            {
                "member_id": member.member_id,
                "failed_commits": stream.metrics.failed_commits,
                "lost_partitions": stream.metrics.lost_partitions,
                "owned": len(member.assignment),
            }
        ),
        flush=True,
    )
    stream.stop()


if __name__ == "__main__":
    main()
