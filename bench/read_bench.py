"""Read throughput: spark_groups.read.reader.read_range against plain confluent-kafka loops.

Produces N records to a fresh topic on an embedded Tansu broker (or ``--bootstrap-servers``),
then times, in this one process, reading all of it with:

  plain        one Consumer assigned to every partition, ``consume(10_000)``, a Python loop
               that checks each record's error and touches its value (the usual loop);
  plain-seq    the same loop, one partition after the other (read_range's access pattern);
  plain-seq-500  the same with ``consume(500)``: fewer live Message objects, so the garbage
               collector never runs (see columns.consume_chunk): the ceiling of a Python loop;
  read_range   the per-partition ranges one after the other, into Arrow record batches.

Every loop uses the reader's librdkafka defaults and stops on record counts (the planner
knows the ends), so the ratios are the cost of the read path itself. Rounds alternate; the
best round of each is reported.

    python bench/read_bench.py                     # 500k x 100 B, 4 partitions
    python bench/read_bench.py --records 200000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from spark_groups.embedded import EmbeddedBroker
from spark_groups.offsets import OffsetRange
from spark_groups.read.reader import READER_DEFAULTS, close_cached_consumers, read_range


def produce(servers: str, topic: str, records: int, size: int, partitions: int) -> list[int]:
    """Write ``records`` values of ``size`` bytes round-robin; return the count per partition."""
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "log.connection.close": False,
        }
    )
    payload = os.urandom(size)
    counts = [0] * partitions
    for i in range(records):
        p = i % partitions
        key = b"%d" % i
        while True:
            try:
                producer.produce(topic, value=payload, key=key, partition=p)
                break
            except BufferError:
                producer.poll(0.05)
        counts[p] += 1
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records still unsent after 120 s")
    return counts


def _consumer(servers: str) -> Consumer:
    return Consumer({**READER_DEFAULTS, "bootstrap.servers": servers, "enable.auto.commit": False})


def _drain(consumer: Consumer, expected: int, chunk: int) -> int:
    """The plain loop: consume until ``expected`` records, touching each one's value."""
    seen = 0
    value_bytes = 0
    while seen < expected:
        for msg in consumer.consume(min(chunk, expected - seen), 1.0):
            if msg.error() is not None:
                continue
            value_bytes += len(msg.value())
            seen += 1
    return seen


def plain_loop(servers: str, topic: str, counts: list[int], chunk: int = 10_000) -> int:
    """One consumer assigned to every partition."""
    consumer = _consumer(servers)
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(len(counts))])
    seen = _drain(consumer, sum(counts), chunk)
    consumer.close()
    return seen


def plain_sequential_loop(servers: str, topic: str, counts: list[int], chunk: int = 10_000) -> int:
    """One consumer, one partition after the other."""
    consumer = _consumer(servers)
    seen = 0
    for p, end in enumerate(counts):
        consumer.assign([KafkaTopicPartition(topic, p, 0)])
        seen += _drain(consumer, end, chunk)
        consumer.unassign()
    consumer.close()
    return seen


def reader_loop(servers: str, topic: str, counts: list[int]) -> int:
    """Read every partition's range with read_range, one after the other."""
    config = {"bootstrap.servers": servers}
    rows = 0
    for p, end in enumerate(counts):
        for batch in read_range(config, OffsetRange(topic, p, 0, end), include_headers=False):
            rows += batch.num_rows
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap-servers", help="use this broker instead of an embedded one")
    parser.add_argument("--profile", action="store_true", help="cProfile one read_range round")
    args = parser.parse_args()

    broker = None
    servers = args.bootstrap_servers
    if not servers:
        broker = EmbeddedBroker().start()
        servers = broker.bootstrap_servers
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": servers})
        for future in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
            future.result(timeout=30)
        start = time.perf_counter()
        counts = produce(servers, topic, args.records, args.size, args.partitions)
        took = time.perf_counter() - start
        print(
            f"produced {sum(counts):,} x {args.size} B to {args.partitions} partitions "
            f"in {took:.1f} s ({sum(counts) / took:,.0f} rec/s)"
        )

        loops = {
            "plain": plain_loop,
            "plain-seq": plain_sequential_loop,
            "plain-seq-500": lambda s, t, c: plain_sequential_loop(s, t, c, chunk=500),
            "read_range": reader_loop,
        }
        best = dict.fromkeys(loops, float("inf"))
        for round_no in range(1, args.rounds + 1):
            for name, loop in loops.items():
                start = time.perf_counter()
                rows = loop(servers, topic, counts)
                took = time.perf_counter() - start
                if rows != sum(counts):
                    raise RuntimeError(f"{name} read {rows} records, expected {sum(counts)}")
                best[name] = min(best[name], took)
                print(f"round {round_no} {name:>13}: {rows / took:>10,.0f} rec/s ({took:.2f} s)")
        rate = {name: sum(counts) / took for name, took in best.items()}
        for name in loops:
            print(f"best {name:>13}: {rate[name]:>10,.0f} rec/s")
        for name in loops:
            if name != "read_range":
                print(f"ratio read_range / {name:<13} = {rate['read_range'] / rate[name]:.2f}")

        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            reader_loop(servers, topic, counts)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        close_cached_consumers()
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
