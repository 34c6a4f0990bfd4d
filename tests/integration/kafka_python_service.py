"""A consumer service written with another client (kafka-python), for the tests that put one
in a group beside Spark members."""

from __future__ import annotations

import threading


class KafkaPythonService(threading.Thread):
    """A consumer service written with kafka-python (range assignment, client id
    ``orders-service``): processes (records the id) and commits after every poll, as users'
    services do. A commit refused by a rebalance is not an error for such a service: the next
    owner reads those records again (at least once)."""

    def __init__(self, servers: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=servers,
            group_id=group,
            client_id="orders-service",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[RangePartitionAssignor],
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        self.seen: list[int] = []
        self.commits = 0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        """Poll, record, commit until :meth:`stop`; then close (leaving the group)."""
        from kafka.errors import CommitFailedError, RebalanceInProgressError

        try:
            while not self.stop_event.is_set():
                batches = self.consumer.poll(timeout_ms=200)
                for records in batches.values():
                    self.seen.extend(int(r.value) for r in records)
                if batches:
                    try:
                        self.consumer.commit()
                        self.commits += 1
                    except (CommitFailedError, RebalanceInProgressError):
                        pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()  # leaves the group: its partitions go back to Spark

    def stop(self) -> None:
        """Stop polling and leave; the thread must end without an error."""
        self.stop_event.set()
        self.join(60)
        assert not self.is_alive()
        assert self.error is None, self.error
