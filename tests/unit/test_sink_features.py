"""Which Delta table features the delta-group sink accepts on an existing table."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_groups.errors import SinkError, SinkFeatureError, SinkTablePropertyError
from spark_groups.sink.features import check_table_features, unsupported_features


@pytest.mark.parametrize(
    ("writer", "features", "conf", "meta", "expected"),
    [
        (2, None, {}, [], []),  # delta-spark's and delta-rs' default protocol
        (7, ["appendOnly", "invariants"], {}, [], []),  # delta-spark 4.4's defaults, as features
        (7, ["deletionVectors", "timestampNtz", "changeDataFeed"], {}, [], []),
        (7, ["columnMapping"], {"delta.columnMapping.mode": "name"}, [], ["columnMapping"]),
        (7, ["columnMapping"], {"delta.columnMapping.mode": "none"}, [], []),
        (
            7,
            ["rowTracking", "domainMetadata", "deletionVectors"],
            {},
            [],
            ["domainMetadata", "rowTracking"],
        ),
        (7, ["inCommitTimestamp"], {}, [], ["inCommitTimestamp"]),
        (3, None, {"delta.constraints.positive": "id > 0"}, [], ["checkConstraints"]),
        (3, None, {}, [], []),  # supported by the protocol, not used
        (4, None, {}, [{"delta.generationExpression": "id * 2"}], ["generatedColumns"]),
        (5, None, {"delta.columnMapping.mode": "id"}, [], ["columnMapping"]),
        (6, None, {}, [{"delta.identity.start": "1"}], ["identityColumns"]),
    ],
)
def test_unsupported_features(writer, features, conf, meta, expected) -> None:
    assert unsupported_features(writer, features, conf, meta) == expected


def test_the_error_names_the_table_and_the_features_and_is_a_sink_error(tmp_path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}))
    check_table_features(DeltaTable(path), path)  # delta-rs' own table: accepted

    error = SinkFeatureError(path, ["columnMapping", "rowTracking"])
    assert isinstance(error, SinkError)
    assert error.path == path and error.features == ("columnMapping", "rowTracking")
    assert "columnMapping, rowTracking" in str(error) and path in str(error)
    assert "new table" in str(error)


def test_a_transaction_retention_is_refused_naming_the_property_and_the_way_out(
    tmp_path,
) -> None:
    path = str(tmp_path / "t")
    write_deltalake(
        path,
        pa.table({"id": pa.array([1], pa.int64())}),
        configuration={"delta.setTransactionRetentionDuration": "interval 7 days"},
    )
    with pytest.raises(SinkTablePropertyError) as caught:
        check_table_features(DeltaTable(path), path)
    error = caught.value
    assert isinstance(error, SinkError)
    assert error.property == "delta.setTransactionRetentionDuration"
    assert error.value == "interval 7 days" and error.path == path
    assert "UNSET TBLPROPERTIES ('delta.setTransactionRetentionDuration')" in str(error)
