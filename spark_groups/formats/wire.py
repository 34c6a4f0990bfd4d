"""Confluent's wire format: a magic byte 0, the schema id (4 bytes, big-endian), the payload.

Protobuf payloads start with the message indexes (zig-zag varints: their count, then each
index into the schema's nested messages; a lone 0 for the first message).
"""

from __future__ import annotations

MAGIC = 0
HEADER_BYTES = 5


class FrameError(ValueError):
    """The bytes are not a Confluent frame (``schema_id``: the id read, when there is one)."""

    def __init__(self, reason: str, schema_id: int | None = None) -> None:
        super().__init__(reason)
        self.schema_id = schema_id


def split(data: bytes | None) -> tuple[int, memoryview]:
    """The schema id and the payload of one framed record; :class:`FrameError` otherwise."""
    if data is None:
        raise FrameError("it is null (a tombstone?): no Confluent header")
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        first = f"0x{data[0]:02x}" if data else "nothing"
        raise FrameError(
            f"it does not start with the Confluent header (magic byte 0x00 and a 4-byte "
            f"schema id; it starts with {first}, {len(data)} bytes in all): not written by a "
            "schema-registry serializer"
        )
    return int.from_bytes(data[1:HEADER_BYTES], "big"), memoryview(data)[HEADER_BYTES:]


def message_indexes(payload: memoryview) -> tuple[tuple[int, ...], memoryview]:
    """A Protobuf payload's message indexes and the message bytes after them."""
    count, at = _zigzag(payload, 0)
    if count == 0:
        return (0,), payload[at:]
    if count < 0 or count > 100:
        raise FrameError(f"its Protobuf message-index count is {count}")
    indexes = []
    for _ in range(count):
        index, at = _zigzag(payload, at)
        indexes.append(index)
    return tuple(indexes), payload[at:]


def _zigzag(data: memoryview, at: int) -> tuple[int, int]:
    """One zig-zag varint of ``data`` at ``at``, and where the next begins."""
    shift = value = 0
    while True:
        if at >= len(data) or shift > 63:
            raise FrameError("its Protobuf message indexes are cut short")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
