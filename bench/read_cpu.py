"""The executor read path's CPU per record, user and kernel, and its page faults.

Produces RECORDS values of SIZE bytes into 4 partitions of a fresh topic on Apache Kafka
(``spark_groups.tools.kafka_broker``), then reads them twice with ``read_ranges`` on the
native path, two partitions a task as two local[2] tasks would (one after the other here),
and prints, per round, records/s, user and system CPU-microseconds per record and minor page
faults per record of this process (the reader; the broker is another process).

    PYTHONPATH=. python -m bench.read_cpu 100000 10000
    ROWS=1000 PYTHONPATH=. python -m bench.read_cpu 100000 10000   # smaller batches
    CONF='{"socket.receive.buffer.bytes": 1048576}' PYTHONPATH=. python -m bench.read_cpu ...
                                                   # librdkafka settings over the reader's
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from bench.common import create_topics, partition_counts, produce
from spark_groups.offsets import OffsetRange
from spark_groups.read.reader import close_cached_consumers, read_ranges
from spark_groups.tools.kafka_broker import KafkaBroker


def main() -> None:
    """Run it: ``python -m bench.read_cpu RECORDS SIZE`` (``$ROWS``: rows a batch; ``$CONF``:
    librdkafka settings as JSON, over the reader's)."""
    records, size = int(sys.argv[1]), int(sys.argv[2])
    rows_per_batch = int(os.environ.get("ROWS", "10000"))
    settings = json.loads(os.environ.get("CONF", "{}"))
    with KafkaBroker() as kafka:
        servers = kafka.bootstrap_servers
        (topic,) = create_topics(servers, 4)
        produce(servers, [topic], 4, records, size)
        ends = partition_counts(records, [topic], 4)  # each partition's log end
        for round_ in range(2):
            close_cached_consumers()
            before, started, n = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0
            for pair in ((0, 1), (2, 3)):
                ranges = [OffsetRange(topic, p, 0, ends[topic, p]) for p in pair]
                for batch in read_ranges(
                    {"bootstrap.servers": servers, **settings},
                    ranges,
                    include_headers=False,
                    max_batch_rows=rows_per_batch,
                    read_path="native",
                ):
                    n += batch.num_rows
            took = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            user = (after.ru_utime - before.ru_utime) * 1e6 / n
            kernel = (after.ru_stime - before.ru_stime) * 1e6 / n
            faults = (after.ru_minflt - before.ru_minflt) / n
            print(
                f"round {round_}: {n} records in {took:.2f} s, {n / took:,.0f} records/s; "
                f"user {user:.2f} us, system {kernel:.2f} us, {faults:.2f} page faults a record",
                flush=True,
            )


if __name__ == "__main__":
    main()
