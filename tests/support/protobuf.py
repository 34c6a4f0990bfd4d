"""Protobuf records for the tests: the order schemas as ``.proto`` text, their message
classes, and confluent-kafka's ``ProtobufSerializer`` registering the text form.

confluent-kafka's serializer registers a schema as a base64 ``FileDescriptorProto``. Apicurio
Registry 2.1.5, the tests' registry, refuses that form::

    ProtobufSerializer(Order, SchemaRegistryClient({"url": url}))(order, ctx)
    SchemaRegistryError: Failed to discover artifact type from content.
    (HTTP status code 422, SR code 42201)

and takes the ``.proto`` text that Java's ``KafkaProtobufSerializer`` registers. So
:func:`text_form_serializer` gives confluent-kafka's serializer the text to register (its
``_schema``); everything else (the subject, the message indexes, the framing) is its own.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

ORDER_V1 = """\
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";

message Order {
  int64 id = 1;
  double amount = 2;
  google.protobuf.Timestamp at = 3;
  Status status = 4;
  repeated string tags = 5;
  map<string, int32> counts = 6;
  oneof payment { string card = 7; string iban = 8; }
  Address ship_to = 9;
  uint32 qty = 10;
  google.protobuf.Duration took = 11;
  optional int32 rank = 12;

  message Address { string city = 1; }
  enum Status { NEW = 0; PAID = 1; }
}

message Refund { int64 order_id = 1; }
"""
#: V1 and a field added (Protobuf's compatible change).
ORDER_V2 = ORDER_V1.replace(
    "optional int32 rank = 12;", "optional int32 rank = 12;\n  string note = 13;"
)
#: Field 2 changed from double to string: a change Protobuf would misread silently.
ORDER_BAD = ORDER_V1.replace("double amount = 2;", "string amount = 2;")


def message_class(text: str, name: str = "shop.Order") -> Any:
    """The message class ``name`` of the ``.proto`` text ``text`` (compiled by protoc)."""
    from google.protobuf.message_factory import GetMessageClass

    from spark_groups.formats.protobuf_schema import load

    return GetMessageClass(load(0, text, ()).message(name))


def text_form_serializer(
    message_type: Any, client: SchemaRegistryClient, text: str, conf: dict[str, Any] | None = None
) -> ProtobufSerializer:
    """confluent-kafka's ``ProtobufSerializer`` for ``message_type``, registering ``text``
    (the type's ``.proto`` text) instead of its base64 descriptor."""
    serializer = ProtobufSerializer(
        message_type, client, {"auto.register.schemas": True, **(conf or {})}
    )
    serializer._schema = Schema(text, "PROTOBUF", [])
    return serializer
