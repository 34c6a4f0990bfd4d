"""Avro in Confluent's wire format, end to end: records written by confluent-kafka's
``AvroSerializer`` against a real schema registry (Apicurio Registry, its Confluent API), read
by ``kafka-group`` with ``value.format=avro-confluent`` into ``delta-group``, on Apache Kafka.

The run's one registry (tests/integration/conftest.py) and Spark session; each test its own
topic and subject."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from spark_groups.errors import RecordDecodeError, SchemaRegistryError

from support.broker import unique, wait_until
from support.registry import Registry
from support.spark import ended_with, run_into_sink, source

pytestmark = pytest.mark.integration

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
#: A compatible next version: a field added with a default.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": "none"}],
}
#: Not readable as V1/V2: ``id`` became a string.
ORDER_WRONG = {
    **ORDER_V1,
    "fields": [{"name": "id", "type": "string"}, *ORDER_V1["fields"][1:]],
}


class Orders:
    """A producer writing orders to ``topic`` as users' producers do: AvroSerializer, the
    schema registered under ``<topic>-value`` (``subject``: under another subject)."""

    def __init__(
        self, servers: str, url: str, topic: str, client_conf: dict[str, str] | None = None
    ) -> None:
        self.topic, self.url = topic, url
        self.producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
        self.client = SchemaRegistryClient(client_conf or {"url": url})

    def send(
        self, schema: dict[str, Any], ids: range, subject: str | None = None, **extra: Any
    ) -> None:
        conf: dict[str, Any] = {"auto.register.schemas": True}
        if subject is not None:
            conf["subject.name.strategy"] = lambda _ctx, _name: subject
        serializer = AvroSerializer(self.client, json.dumps(schema), conf=conf)
        context = SerializationContext(self.topic, MessageField.VALUE)
        for i in ids:
            order = {"id": str(i) if schema is ORDER_WRONG else i, "amount": i / 4,
                     "at": 1_767_225_600_000 + i, **extra}  # fmt: skip
            self.producer.produce(self.topic, serializer(order, context), partition=i % 2)
        assert self.producer.flush(30) == 0

    def serialize(
        self, schema: dict[str, Any], ids: range, **extra: Any
    ) -> list[tuple[bytes, int]]:
        """The records :meth:`send` would write (the schema registered now), to send later."""
        serializer = AvroSerializer(self.client, json.dumps(schema))
        context = SerializationContext(self.topic, MessageField.VALUE)
        return [
            (serializer({"id": i, "amount": i / 4, "at": 1_767_225_600_000 + i, **extra},
                        context), i % 2)
            for i in ids
        ]  # fmt: skip

    def send_raw(self, values: list[bytes] | list[tuple[bytes, int]]) -> None:
        """Write ``values`` as they are (to partition 0, or each to its own)."""
        for value in values:
            data, partition = value if isinstance(value, tuple) else (value, 0)
            self.producer.produce(self.topic, data, partition=partition)
        assert self.producer.flush(30) == 0


def avro_options(servers: str, topic: str, group: str, url: str, **extra: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": servers, "subscribe": topic, "group.id": group,
        "startingOffsets": "earliest", "value.format": "avro-confluent",
        "schema.registry.url": url, **extra,
    }  # fmt: skip


def run_avro(spark: Any, opts: dict[str, str], table: Path, cp: Path, group: str) -> Any:
    df = source(spark, opts, cp).select("value.*", "topic", "partition", "offset")
    return run_into_sink(spark, df, table, cp, group, mergeSchema="true")


def test_avro_into_delta_group_exactly_once_through_a_schema_change_and_bad_records(
    spark, bootstrap_servers: str, make_topic, registry: Registry, tmp_path: Path
) -> None:
    topic = make_topic(2)
    orders = Orders(bootstrap_servers, registry.url, topic)
    orders.send(ORDER_V1, range(0, 100))
    group, table, cp, dead = unique("g"), tmp_path / "t", tmp_path / "cp", tmp_path / "dead"
    opts = avro_options(
        bootstrap_servers, topic, group, registry.url, **{"deadLetter.table": str(dead)}
    )
    assert run_avro(spark, opts, table, cp, group) is None
    got = DeltaTable(str(table)).to_pyarrow_table()
    assert sorted(got.column("id").to_pylist()) == list(range(100))
    assert got.schema.names == ["id", "amount", "at", "topic", "partition", "offset"]

    # The producers move to V2 while the query's reader schema is V1 (fixed at its start);
    # one producer writes an incompatible schema under a subject of its own, one plain bytes.
    orders.send(ORDER_V2, range(100, 150), note="gift")
    orders.send(ORDER_WRONG, range(150, 152), subject=unique("elsewhere"))
    orders.send_raw([b"not avro", b"\x00\x00\x0f\x42\x3fcut"])
    # The restarted query reads with V2, the subject's latest: the table takes `note`.
    assert run_avro(spark, opts, table, cp, group) is None
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(150)), "a record is missing or written twice"
    notes = {r["id"]: r["note"] for r in rows}
    assert {notes[i] for i in range(100)} == {None}  # written before the table had `note`
    assert {notes[i] for i in range(100, 150)} == {"gift"}

    letters = DeltaTable(str(dead)).to_pyarrow_table().to_pylist()
    assert len(letters) == 4 and {r["group"] for r in letters} == {group}
    assert sum("cannot be resolved" in r["dead_letter_error"] for r in letters) == 2
    assert any("Confluent header" in r["dead_letter_error"] for r in letters)
    assert any(r["schemaId"] == 0x0F423F for r in letters)  # the cut one: an unknown id
    assert {r["value"] for r in letters} >= {b"not avro"}


def test_a_bad_record_without_dead_letters_fails_the_query_naming_it_then_dead_letters_pass(
    spark, bootstrap_servers: str, make_topic, registry: Registry, tmp_path: Path
) -> None:
    topic = make_topic(2)
    orders = Orders(bootstrap_servers, registry.url, topic)
    orders.send(ORDER_V1, range(0, 10))
    orders.send_raw([b"plain text"])  # partition 0, after ids 0, 2, 4, 6, 8: offset 5
    group, table, cp = unique("g"), tmp_path / "t", tmp_path / "cp"
    opts = avro_options(bootstrap_servers, topic, group, registry.url)
    error = run_avro(spark, opts, table, cp, group)
    assert error is not None
    text = str(error)
    assert f"record {topic}-0@5 (no schema id)" in text and "deadLetter.table" in text
    assert RecordDecodeError.__name__ in text
    assert not (table / "_delta_log").exists()  # the failed batch committed nothing

    # The way out the error names: dead letters, and the same query restarted.
    opts["deadLetter.table"] = str(tmp_path / "dead")
    assert run_avro(spark, opts, table, cp, group) is None
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == list(
        range(10)
    )
    letters = DeltaTable(str(tmp_path / "dead")).to_pyarrow_table().to_pylist()
    assert [(r["partition"], r["offset"], r["value"]) for r in letters] == [(0, 5, b"plain text")]


def test_a_registry_down_at_the_start_is_a_typed_error_naming_the_url(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://reader:s3cret@127.0.0.1:{port}"
    opts = avro_options(
        bootstrap_servers, make_topic(1), unique("g"), url,
        **{"schema.registry.max.retries": "0"},
    )  # fmt: skip
    with pytest.raises(Exception) as err:
        source(spark, opts, tmp_path / "cp")
    text = str(err.value)
    assert SchemaRegistryError.__name__ in text and f"http://***@127.0.0.1:{port}" in text
    assert "s3cret" not in text


class Outage(threading.Thread):
    """A TCP proxy in front of the registry that can go down: while down it takes each
    connection and closes it at once (a stopped registry, as its clients see it), counting
    them, so a test can wait for a client to have tried."""

    def __init__(self, target_port: int) -> None:
        super().__init__(daemon=True)
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.refused = 0

    def url(self, registry_url: str) -> str:
        return registry_url.replace(f":{self.target_port}/", f":{self.port}/")

    def run(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                self.refused += 1
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def test_a_registry_down_mid_run_is_retried_within_the_bound_then_fails_the_query(
    spark, bootstrap_servers: str, make_topic, registry: Registry, tmp_path: Path
) -> None:
    topic = make_topic(2)
    orders = Orders(bootstrap_servers, registry.url, topic)
    orders.send(ORDER_V1, range(0, 20))
    outage = Outage(int(registry.url.split(":")[2].split("/")[0]))
    outage.start()
    group, table, cp = unique("g"), tmp_path / "t", tmp_path / "cp"
    opts = avro_options(
        bootstrap_servers, topic, group, outage.url(registry.url),
        schemaRegistryTimeoutMs="4000", **{"value.schema.version": "1"},
    )  # fmt: skip
    assert run_avro(spark, opts, table, cp, group) is None

    def ids() -> list[int]:
        return sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist())

    def running() -> Any:  # a running query, its first trigger done
        query = (
            source(spark, opts, cp).select("value.*", "topic", "partition", "offset")
            .writeStream.format("delta-group").option("group.id", group)
            .option("checkpointLocation", str(cp)).trigger(processingTime="500 milliseconds")
            .start(str(table))
        )  # fmt: skip
        wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
        return query

    # Records of a writer schema these workers have not seen (version 2, registered now),
    # sent while the registry is down: a task must ask for it, and waits until it is back.
    v2 = orders.serialize(ORDER_V2, range(20, 40), note="late")
    query = running()
    outage.down.set()
    orders.send_raw(v2)
    wait_until(lambda: outage.refused > 0, 120, "a task asking the registry while it is down")
    outage.down.clear()
    wait_until(lambda: ids() == list(range(40)), 120, "every record after the outage")
    query.stop()

    # Down for longer than schemaRegistryTimeoutMs: the query fails naming the registry and
    # writes none of them; once it is back a run reads every record.
    v3 = orders.serialize({**ORDER_V2, "doc": "v3"}, range(40, 50), note="later")
    query = running()
    outage.down.set()
    orders.send_raw(v3)
    error = str(ended_with(lambda: query))  # Spark raises the query's error from the wait
    assert SchemaRegistryError.__name__ in error and "schemaRegistryTimeoutMs" in error
    assert f"127.0.0.1:{outage.port}" in error
    assert ids() == list(range(40))
    outage.down.clear()
    assert run_avro(spark, opts, table, cp, group) is None
    assert ids() == list(range(50))
    outage.listener.close()


def test_basic_auth_refused_then_read_with_the_password_nowhere(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    password = "pw-" + unique("s3cret")
    with Registry(basic_auth=("reader", password)) as secured:
        topic = make_topic(2)
        orders = Orders(bootstrap_servers, secured.url, topic, secured.client_conf())
        orders.send(ORDER_V1, range(0, 10))
        orders.send_raw([b"dead letter"])
        group, table, cp, dead = unique("g"), tmp_path / "t", tmp_path / "cp", tmp_path / "dead"
        opts = avro_options(bootstrap_servers, topic, group, secured.url,
                            **{"deadLetter.table": str(dead)})  # fmt: skip
        wrong = {**opts, "schema.registry.basic.auth.user.info": "reader:wrong" + password}
        with pytest.raises(Exception) as refused:
            source(spark, wrong, cp)
        assert "refused the credentials (HTTP 401)" in str(refused.value)
        assert password not in str(refused.value)

        opts["schema.registry.basic.auth.user.info"] = f"reader:{password}"
        df = source(spark, opts, cp)
        assert password not in df._jdf.queryExecution().toString()  # the plan Spark shows
        assert run_avro(spark, opts, table, cp, group) is None
        assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == list(
            range(10)
        )
    stored = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.relative_to(tmp_path).parts[0] for p in stored} >= {"t", "cp", "dead"}
    assert [p for p in stored if password.encode() in p.read_bytes()] == []


def test_json_schema_records_into_delta_group_by_name(
    spark, bootstrap_servers: str, make_topic, registry: Registry, tmp_path: Path
) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    topic = make_topic(2)
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#", "title": "Reading",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "celsius": {"type": ["number", "null"]},
                       "tags": {"type": "array", "items": {"type": "string"}}},
    }  # fmt: skip
    key_schema = {"type": "object", "properties": {"site": {"type": "string"}}}
    client = SchemaRegistryClient({"url": registry.url})
    serializer = JSONSerializer(json.dumps(schema), client)
    keys = JSONSerializer(json.dumps(key_schema), client)  # subject <topic>-key
    context = SerializationContext(topic, MessageField.VALUE)
    key_context = SerializationContext(topic, MessageField.KEY)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(30):
        reading = {"id": i, "celsius": i / 2 if i % 3 else None, "tags": [f"t{i % 2}"]}
        key = keys({"site": f"s{i % 4}"}, key_context)
        producer.produce(topic, serializer(reading, context), key, partition=i % 2)
    key = keys({"site": "s0"}, key_context)
    producer.produce(topic, b"\x00" + (2**31 - 1).to_bytes(4, "big") + b"{}", key, partition=0)
    assert producer.flush(30) == 0
    group, table, cp, dead = unique("g"), tmp_path / "t", tmp_path / "cp", tmp_path / "dead"
    extra = {"value.format": "json-schema-confluent", "key.format": "json-schema-confluent",
             "deadLetter.table": str(dead)}  # fmt: skip
    opts = avro_options(bootstrap_servers, topic, group, registry.url, **extra)
    df = source(spark, opts, cp).select("key.site", "value.*", "topic", "partition", "offset")
    assert run_into_sink(spark, df, table, cp, group) is None
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(30))
    assert {r["id"]: (r["celsius"], r["tags"], r["site"]) for r in rows}[5] == (2.5, ["t1"], "s1")
    letters = DeltaTable(str(dead)).to_pyarrow_table().to_pylist()
    assert [(r["schemaId"], r["value"][5:]) for r in letters] == [(2**31 - 1, b"{}")]
