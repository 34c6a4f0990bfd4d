"""What every format's column decoder shares: the bad record, and decoded values into Arrow."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_groups.formats.wire import HEADER_BYTES, MAGIC

#: Longest reason kept per bad record.
MAX_REASON = 500


@dataclass(frozen=True)
class BadRecord:
    """Row ``row`` of the batch could not be decoded: the schema id of its header (None
    without one) and why."""

    row: int
    schema_id: int | None
    reason: str


def no_header(data: bytes) -> str:
    """Why a value without the Confluent header is bad."""
    first = f"0x{data[0]:02x}" if data else "nothing"
    return (
        "it does not start with the Confluent header (magic byte 0x00, then a 4-byte schema "
        f"id): it starts with {first} ({len(data)} bytes); not written by a schema-registry "
        "serializer"
    )


def framed(
    values: Sequence[bytes | None], out: list[Any], bad: list[BadRecord]
) -> Iterator[tuple[int, bytes, int]]:
    """Each of ``values`` that has the Confluent header, as (row, bytes, schema id); for a
    null value ``None`` is appended to ``out``, for one without the header ``None`` to
    ``out`` and a :class:`BadRecord` to ``bad``. The caller appends one value to ``out`` for
    each one yielded."""
    for row, data in enumerate(values):
        if data is None:
            out.append(None)
        elif len(data) < HEADER_BYTES or data[0] != MAGIC:
            out.append(None)
            bad.append(BadRecord(row, None, no_header(data)))
        else:
            yield row, data, int.from_bytes(data[1:HEADER_BYTES], "big")


def to_arrow(
    values: list[Any], bad: list[BadRecord], raw: pa.DataType, arrow: pa.DataType
) -> pa.Array:
    """``values`` as an Arrow array of type ``raw`` cast to ``arrow``; a value that does not
    fit becomes null and a :class:`BadRecord` in ``bad`` (kept in row order)."""
    try:
        array = pa.array(values, raw)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        for row, value in enumerate(values):
            if value is None:
                continue
            try:
                pa.array([value], raw)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                values[row] = None
                bad.append(
                    BadRecord(row, None, f"does not fit the reader schema: {exc}"[:MAX_REASON])
                )
        bad.sort(key=lambda b: b.row)
        array = pa.array(values, raw)
    return array if array.type == arrow else array.cast(arrow)
