"""Tables on a real S3-compatible server (S3Proxy on loopback, docs/storage.md)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups.tools.s3_server import S3Server

pytestmark = pytest.mark.timeout(300)


def _race_one_version(uri: str, options: dict[str, str]) -> tuple[int, list[str]]:
    """Two writers that both saw the table at the same version commit the next version at
    the same moment, without retries: the version they raced for and each one's outcome."""
    tables = [DeltaTable(uri, storage_options=options) for _ in range(2)]
    seen = tables[0].version()
    assert tables[1].version() == seen
    start = threading.Barrier(2)
    outcome = ["", ""]

    def commit(i: int) -> None:
        start.wait()
        try:
            write_deltalake(
                tables[i],
                pa.table({"writer": [i]}),
                mode="append",
                commit_properties=CommitProperties(max_commit_retries=0),
            )
            outcome[i] = "won"
        except Exception as exc:  # the loser's CommitFailedError
            outcome[i] = f"lost: {type(exc).__name__}"

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return seen + 1, outcome


def test_conditional_put_lets_exactly_one_of_two_commits_of_a_version_win(
    s3_server: S3Server, s3_bucket: str
) -> None:
    options = s3_server.storage_options()  # aws_conditional_put=etag
    uri = f"{s3_bucket}/race"
    write_deltalake(uri, pa.table({"writer": [-1]}), storage_options=options)
    for _ in range(5):
        version, outcome = _race_one_version(uri, options)
        assert sorted(o.split(":")[0] for o in outcome) == ["lost", "won"], outcome
        table = DeltaTable(uri, storage_options=options)
        assert table.version() == version
        winner = outcome.index("won")
        # The log's entry for the raced version is the winner's: its one row is there, the
        # loser's is nowhere.
        rows = DeltaTable(uri, version=version, storage_options=options).to_pyarrow_table()
        later = rows.column("writer").to_pylist()
        before = DeltaTable(uri, version=version - 1, storage_options=options)
        earlier = before.to_pyarrow_table().column("writer").to_pylist()
        assert sorted(later) == sorted([*earlier, winner])
