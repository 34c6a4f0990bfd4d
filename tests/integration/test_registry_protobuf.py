"""Protobuf in Confluent's wire format, end to end: records written by confluent-kafka's
``ProtobufSerializer`` against a real schema registry (Apicurio Registry, which holds them as
``.proto`` text: tests/support/protobuf.py), read by ``kafka-group`` with
``value.format=protobuf-confluent`` into ``delta-group``, on Apache Kafka.

The run's one registry (tests/integration/conftest.py) and Spark session."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from support.broker import unique
from support.protobuf import ORDER_BAD, ORDER_V1, ORDER_V2, message_class, text_form_serializer
from support.registry import Registry
from support.spark import run_into_sink, source

pytestmark = pytest.mark.integration

AT = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def send(
    producer: Producer, topic: str, serializer: Any, message_type: Any, ids: range, **extra: Any
) -> None:
    """Orders ``ids`` of ``message_type`` serialized by ``serializer``, over two partitions."""
    context = SerializationContext(topic, MessageField.VALUE)
    for i in ids:
        order = message_type(id=i, status=i % 2, tags=[f"t{i % 3}"], **extra)
        order.at.FromDatetime(AT + dt.timedelta(seconds=i))
        producer.produce(topic, serializer(order, context), partition=i % 2)
    assert producer.flush(30) == 0


def test_protobuf_into_delta_group_exactly_once_through_a_schema_change_and_bad_records(
    spark, bootstrap_servers: str, make_topic, registry: Registry, tmp_path: Path
) -> None:
    topic = make_topic(2)
    client = SchemaRegistryClient({"url": registry.url})
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    v1, v2, wrong = (message_class(t) for t in (ORDER_V1, ORDER_V2, ORDER_BAD))
    send(producer, topic, text_form_serializer(v1, client, ORDER_V1), v1, range(0, 60),
         amount=1.5)  # fmt: skip
    group, table, cp, dead = unique("g"), tmp_path / "t", tmp_path / "cp", tmp_path / "dead"
    opts = {
        "kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic, "group.id": group,
        "startingOffsets": "earliest", "value.format": "protobuf-confluent",
        "schema.registry.url": registry.url, "deadLetter.table": str(dead),
    }  # fmt: skip

    def run() -> Any:
        df = source(spark, opts, cp)
        # every field but `took`: an interval, which a Delta table cannot hold
        fields = [f"value.{n}" for n in df.schema["value"].dataType.fieldNames() if n != "took"]
        return run_into_sink(
            spark,
            df.select(*fields, "topic", "partition", "offset"),
            table,
            cp,
            group,
            mergeSchema="true",
        )

    assert run() is None
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted(r["id"] or 0 for r in rows) == list(range(60))
    # id 0 and status NEW are proto3 defaults, so not set: null, as from_protobuf reads them
    by_id = {r["id"] or 0: r for r in rows}
    assert (by_id[0]["id"], by_id[0]["status"], by_id[0]["tags"]) == (None, None, ["t0"])
    assert {(i % 2, by_id[i]["status"]) for i in by_id} == {(0, None), (1, "PAID")}
    assert by_id[7]["at"] == AT + dt.timedelta(seconds=7) and by_id[7]["amount"] == 1.5

    # The producers move to V2 while the query's reader schema is V1 (fixed at its start);
    # one producer changes a field's type under a subject of its own, one writes plain bytes.
    send(producer, topic, text_form_serializer(v2, client, ORDER_V2), v2, range(60, 90),
         amount=2.5, note="gift")  # fmt: skip
    elsewhere = unique("elsewhere")
    renamed = text_form_serializer(
        wrong, client, ORDER_BAD, {"subject.name.strategy": lambda _ctx, _name: elsewhere}
    )
    send(producer, topic, renamed, wrong, range(90, 92), amount="2.5")
    producer.produce(topic, b"not protobuf", partition=0)
    assert producer.flush(30) == 0
    # The restarted query reads with V2, the subject's latest: the table takes `note`.
    assert run() is None
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    ids = sorted((r["id"] or 0) for r in rows)
    assert ids == list(range(90)), "a record is missing or written twice"
    assert {r["note"] for r in rows if (r["id"] or 0) >= 60} == {"gift"}
    assert {r["amount"] for r in rows if (r["id"] or 0) >= 60} == {2.5}

    letters = DeltaTable(str(dead)).to_pyarrow_table().to_pylist()
    assert len(letters) == 3 and {r["group"] for r in letters} == {group}
    changed = [r for r in letters if "is string in the writer schema" in r["dead_letter_error"]]
    assert len(changed) == 2 and changed[0]["schemaId"] is not None
    assert [r["value"] for r in letters if r["schemaId"] is None] == [b"not protobuf"]
