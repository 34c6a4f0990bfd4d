"""Which Delta table features the delta-group sink can honour on an existing table.

The sink appends its own Parquet files with delta-rs (logical column names, no computed
columns). A table using features such an append would break (column mapping, generated and
identity columns, CHECK constraints, row tracking, ...) is refused before anything is
committed (:class:`~spark_groups.errors.SinkFeatureError`); delta-spark's defaults and
deletion vectors are accepted (:data:`SAFE_FEATURES`). Properties that break exactly-once
are refused too (:class:`~spark_groups.errors.SinkTablePropertyError`,
:data:`UNSAFE_PROPERTIES`). docs/sink.md, "Tables made by other engines".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spark_groups.errors import SinkFeatureError, SinkTablePropertyError

#: Features an append of the sink's own files keeps intact.
SAFE_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "timestampNtz",
        "deletionVectors",
        "changeDataFeed",  # inserts need no change files: readers derive them from the adds
        "vacuumProtocolCheck",
    }
)

#: Table properties the sink refuses: property -> why it breaks exactly-once.
UNSAFE_PROPERTIES = {
    "delta.setTransactionRetentionDuration": (
        "transaction ids older than that expire, and they are how the sink knows which "
        "batches a partition already holds: a partition idle that long could be written twice"
    ),
}

#: Features a legacy protocol (no feature list) implies, by minimum writer version.
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}


def _legacy_features(writer_version: int) -> set[str]:
    return {f for v, fs in _LEGACY_WRITER.items() if writer_version >= v for f in fs}


def _in_use(feature: str, configuration: Mapping[str, str], field_metadata: list[dict]) -> bool:
    """Whether a feature that a protocol merely *supports* is used by this table."""
    if feature == "columnMapping":
        return configuration.get("delta.columnMapping.mode", "none").lower() != "none"
    if feature == "checkConstraints":
        return any(k.startswith("delta.constraints.") for k in configuration)
    if feature == "generatedColumns":
        return any("delta.generationExpression" in m for m in field_metadata)
    if feature == "identityColumns":
        return any(any(k.startswith("delta.identity.") for k in m) for m in field_metadata)
    return True


def unsupported_features(
    writer_version: int,
    writer_features: Iterable[str] | None,
    configuration: Mapping[str, str],
    field_metadata: list[dict],
) -> list[str]:
    """The table's features (listed, or implied by a legacy writer version) that the sink
    cannot honour and that the table uses, sorted."""
    listed = set(writer_features or ()) if writer_version >= 7 else _legacy_features(writer_version)
    return sorted(f for f in listed - SAFE_FEATURES if _in_use(f, configuration, field_metadata))


def check_table_features(table: Any, path: str) -> None:
    """Raise :class:`SinkFeatureError` when the deltalake ``table`` uses features the sink
    cannot honour, :class:`SinkTablePropertyError` when it sets a property that breaks
    exactly-once (see the module doc)."""
    protocol = table.protocol()
    metadata = [dict(f.metadata or {}) for f in table.schema().fields]
    found = unsupported_features(
        protocol.min_writer_version,
        protocol.writer_features,
        dict(table.metadata().configuration or {}),
        metadata,
    )
    if found:
        raise SinkFeatureError(path, found)
    configuration = dict(table.metadata().configuration or {})
    for name, why in UNSAFE_PROPERTIES.items():
        value = next((v for k, v in configuration.items() if k.lower() == name.lower()), None)
        if value is not None:
            raise SinkTablePropertyError(path, name, value, why)
