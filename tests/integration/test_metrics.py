"""Coordinator metrics reach the query progress (and a listener in the user's process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from spark_groups.metrics import coordinator_metrics, log_end_offsets

from support.broker import produce_ids, unique, wait_until
from support.options import group_options


class Collect(StreamingQueryListener):
    """Keeps the coordinator metrics of every progress event, by query id."""

    def __init__(self) -> None:
        self.seen: dict[str, list[dict[str, Any]]] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        self.seen.setdefault(str(progress.id), []).extend(coordinator_metrics(progress))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def test_progress_carries_the_coordinator_metrics(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(100), 2)
    opts = group_options(
        bootstrap_servers, topic, unique("g"), str(tmp_path / "ledger"), maxOffsetsPerTrigger="30"
    )
    listener = Collect()
    spark.streams.addListener(listener)
    try:
        query = (
            spark.readStream.format("kafka-group")
            .options(**opts)
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        assert query.awaitTermination(180), "AvailableNow query did not end"
        assert query.exception() is None
        progresses = [p for p in query.recentProgress if p["numInputRows"]]
        metrics = [m for p in progresses for m in coordinator_metrics(p)]
        assert len(metrics) == len(progresses) >= 4  # 100 records, at most 30 per batch
        last = metrics[-1]
        assert last["assigned_partitions"] == 2
        # Kafka numbers generations from 1, the embedded broker from 0.
        assert last["generation"] >= 0 and last["rebalances"] >= 1 and last["member_id"]
        assert last["last_rebalance_age_s"] >= 0
        assert last["failed_commits"] == last["barrier_timeouts"] == last["lost_partitions"] == 0
        # Batches are planned one by one and committed behind them, so the lag shrinks.
        assert [m["batches_planned"] for m in metrics] == list(range(1, len(metrics) + 1))
        # Lag counts from the committed offsets: none before batch 0 is committed, then
        # 100 - 30 once it is (at most 30 records per batch), then less.
        assert metrics[0]["lag"] == 0 and metrics[1]["lag"] == 70
        assert 0 < last["lag"] < 70
        assert last["batches_committed"] >= len(metrics) - 1
        assert log_end_offsets(progresses[-1]["sources"][0]) == {topic: {"0": 50, "1": 50}}
        # Listener events are delivered asynchronously, in the user's process.
        wait_until(
            lambda: len(listener.seen.get(str(query.id), [])) >= len(metrics),
            60,
            "the listener to see every progress",
        )
        assert listener.seen[str(query.id)][-1]["batches_planned"] == len(metrics)
    finally:
        spark.streams.removeListener(listener)
