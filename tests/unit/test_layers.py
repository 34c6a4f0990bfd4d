"""The rules of the house (docs/architecture.md): which modules may import which clients, and
that the tests import no benchmark code."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spark_groups"
TESTS = Path(__file__).resolve().parents[1]
#: The one test module that imports ``bench``: it tests the benchmarks' harness.
BENCH_SMOKE = "integration/test_bench_smoke.py"

#: Third-party root module -> where in spark_groups it may be imported.
ALLOWED = {
    "pyspark": ("spark/", "sink/spark.py", "deadletter.py"),
    "confluent_kafka": ("kafka/",),
    "deltalake": ("storage/delta.py", "storage/maintenance.py", "ledger/", "sink/"),
}


def imports(path: Path) -> set[str]:
    """The root modules ``path`` imports (anywhere in it, functions included)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_clients_are_imported_only_where_the_architecture_says() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for root in imports(path) & set(ALLOWED):
            if not where.startswith(ALLOWED[root]):
                wrong.append(f"{where} imports {root}")
    assert wrong == []


def test_tests_import_no_benchmark_code() -> None:
    """``bench`` builds on the tests' support (``tests/support``), not the other way round."""
    found = (p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py")))
    wrong = [where for where in found if "bench" in imports(TESTS / where)]
    assert wrong == [BENCH_SMOKE]
