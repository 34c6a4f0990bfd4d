"""Confluent's wire format: a magic byte 0, the writer schema's id (4 bytes, big-endian), then
the record as its format encodes it (Avro's binary encoding, JSON text)."""

from __future__ import annotations

#: The first byte of every framed record.
MAGIC = 0
#: The magic byte and the schema id.
HEADER_BYTES = 5
