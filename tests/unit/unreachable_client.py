"""Every kind of Kafka client spark_groups creates, pointed at a broker that is not there.

    python unreachable_client.py SECONDS

Runs, one after the other, the driver's member (a ``GroupStream`` joining a group), and the
executors' read path on both paths (python, and native where it is built), each until it
gives up with its typed error or ``SECONDS`` pass. Logging is configured as in Spark's
workers (``log_to_stderr``), so stderr must hold formatted ``spark_groups`` lines only.
"""

from __future__ import annotations

import sys

from spark_groups.errors import SparkGroupsError
from spark_groups.group.stream import GroupStream
from spark_groups.offsets import BatchOffset, OffsetRange
from spark_groups.options import parse_options
from spark_groups.read import native
from spark_groups.read.reader import read_ranges
from spark_groups.spark.worker_logging import log_to_stderr

SERVERS = "127.0.0.1:1"


def main() -> None:
    seconds = float(sys.argv[1])
    log_to_stderr()
    options = parse_options(
        {
            "kafka.bootstrap.servers": SERVERS,
            "subscribe": "orders",
            "group.id": "unreachable",
            "kafka.sasl.password": "hunter2-secret",  # must never be printed
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "spark-user",
            "brokerTimeoutMs": str(int(seconds * 1000)),
        }
    )
    stream = GroupStream(options)
    try:
        stream.latest_offset(BatchOffset.initial().to_json(), None)
    except SparkGroupsError as exc:
        print(f"member: {type(exc).__name__}", flush=True)
    finally:
        stream.stop()
    for path in ["python", "native"] if native.available() else ["python"]:
        try:
            list(
                read_ranges(
                    {"bootstrap.servers": SERVERS},
                    [OffsetRange("orders", 0, 0, 10)],
                    include_headers=False,
                    poll_timeout_s=seconds,
                    read_path=path,
                )
            )
        except SparkGroupsError as exc:
            print(f"read {path}: {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    main()
