"""Tables on a real Azure Blob Storage server (Azurite on loopback, docs/storage.md): delta-rs'
commits race safely there. A group query with its tables on it: test_store_queries.py."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

pytestmark = pytest.mark.timeout(300)


def test_two_commits_of_one_version_one_wins_the_other_is_refused(
    azure_server: Any, azure_container: str
) -> None:
    """delta-rs commits on Azure with a create-if-absent of the version's log file: of two
    writers that saw the same version, exactly one gets the next one."""
    uri, options = f"{azure_container}/race", azure_server.storage_options()
    write_deltalake(uri, pa.table({"writer": [-1]}), storage_options=options)
    for _ in range(3):
        tables = [DeltaTable(uri, storage_options=options) for _ in range(2)]
        seen = tables[0].version()
        start, outcome = threading.Barrier(2), ["", ""]

        def commit(
            i: int, tables: list = tables, outcome: list = outcome, start: Any = start
        ) -> None:
            start.wait()
            try:
                write_deltalake(
                    tables[i], pa.table({"writer": [i]}), mode="append",
                    commit_properties=CommitProperties(max_commit_retries=0),
                )  # fmt: skip
                outcome[i] = "won"
            except Exception as exc:
                outcome[i] = f"lost: {type(exc).__name__}"

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(outcome)[1] == "won" and sorted(outcome)[0].startswith("lost"), outcome
        assert DeltaTable(uri, storage_options=options).version() == seen + 1
