"""The rules of the house (docs/architecture.md): which modules may import which clients, no
import cycles between packages, package indexes that are true, and that the tests import no
benchmark code."""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spark_groups"
TESTS = Path(__file__).resolve().parents[1]
#: The one test module that imports ``bench``: it tests the benchmarks' harness.
BENCH_SMOKE = "integration/test_bench_smoke.py"

#: Third-party root module -> where in spark_groups it may be imported.
ALLOWED = {
    "pyspark": ("spark/", "sources/", "sink/spark.py", "deadletter.py"),
    # librdkafka's clients in kafka/; the schema registry's HTTP client where formats use it
    "confluent_kafka": ("kafka/", "formats/registry.py"),
    "deltalake": (
        "storage/delta.py",
        "storage/maintenance_steps.py",
        "storage/snapshots.py",
        "storage/transactions.py",
        "ledger/",
        "sink/",
    ),
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


def package_of(module: str) -> str:
    """The node ``module`` belongs to in the package graph: its package (``kafka``,
    ``group.member``), or itself for a top-level module (``options``; ``spark_groups`` for the
    package's ``__init__``)."""
    parts = module.split(".")[1:]
    if not parts:
        return "spark_groups"
    path = PACKAGE.joinpath(*parts)
    if (path / "__init__.py").exists():  # a package's own __init__
        return ".".join(parts)
    return ".".join(parts[:-1]) or parts[0]


def module_of(path: Path) -> str:
    """The dotted name of the module at ``path``."""
    parts = ["spark_groups", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path) -> Iterator[tuple[str, int]]:
    """The spark_groups modules ``path`` imports, with the line of each import: every import
    statement, those inside functions and under ``if TYPE_CHECKING:`` included."""
    module = module_of(path)
    here = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "spark_groups":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "spark_groups":
                continue
            for alias in node.names:  # ``from spark_groups.storage import checkpoint``
                submodule = f"{source}.{alias.name}"
                relative = PACKAGE.joinpath(*submodule.split(".")[1:])
                is_module = relative.with_suffix(".py").exists() or relative.is_dir()
                yield (submodule if is_module else source), node.lineno


def package_imports() -> dict[str, dict[str, str]]:
    """Package -> the packages it imports -> where (the first import that does)."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = package_of(module_of(path))
        for imported, line in internal_imports(path):
            target = package_of(imported)
            if target != source:
                where = f"{path.relative_to(PACKAGE).as_posix()}:{line} imports {imported}"
                graph.setdefault(source, {}).setdefault(target, where)
    return graph


def shortest_cycle(graph: dict[str, dict[str, str]], start: str) -> list[str] | None:
    """The shortest chain of packages from ``start`` back to it, None when there is none."""
    paths = {start: [start]}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph.get(node, {})):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return None


def test_no_import_cycles_between_packages() -> None:
    """No package imports, directly or through others, a package that imports it back.

    Nodes are the packages (``kafka``, ``group``, ``group.member``, ...) and the top-level
    modules (``options``, ``errors``, ...). Every import counts, also one inside a function or
    under ``if TYPE_CHECKING:``: a cycle a deferred import hides is still a cycle in the
    design. (The parent package's ``__init__`` that Python runs before a submodule is not an
    import of it.) The message names each cycle as its chain of packages and, for each step,
    the import that makes it."""
    graph = package_imports()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        cycle = shortest_cycle(graph, start)
        if cycle is not None and not any(start in known for known in cycles):
            cycles.append(cycle)
    report = [
        " -> ".join(cycle) + "".join(f"\n    {graph[a][b]}" for a, b in pairwise(cycle))
        for cycle in cycles
    ]
    assert not report, "import cycles between packages:\n  " + "\n  ".join(report)


#: How a package's index names a module: ``:mod:`spark_groups.group.stream``` (or with ``~``).
MODULE_REFERENCE = re.compile(r":mod:`~?(spark_groups(?:\.\w+)*)`")


def exists(module: str) -> bool:
    """True when the dotted ``module`` is a module or a package of spark_groups."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_package_index_names_its_modules() -> None:
    """A package's ``__init__`` docstring is its index: it names each of its modules and
    subpackages as a ``:mod:`` reference (``:mod:`~spark_groups.group.stream```, a line or a
    phrase each: what it is), and every ``:mod:`` reference in it names a module that exists."""
    wrong = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = module_of(init)
        named = set(MODULE_REFERENCE.findall(ast.get_docstring(ast.parse(init.read_text())) or ""))
        parts = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
        parts |= {p.parent.name for p in init.parent.glob("*/__init__.py")}
        wrong += [
            f"{package}'s index does not name {package}.{m}"
            for m in sorted(parts)
            if f"{package}.{m}" not in named
        ]
        wrong += [
            f"{package}'s index names {m}: no such module" for m in sorted(named) if not exists(m)
        ]
    assert not wrong, "\n".join(wrong)


def test_no_two_modules_share_a_file_name() -> None:
    """A module's file name alone says which module it is (``__init__.py`` aside)."""
    names = [p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_tests_import_no_benchmark_code() -> None:
    """``bench`` builds on the tests' support (``tests/support``), not the other way round."""
    found = (p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py")))
    wrong = [where for where in found if "bench" in imports(TESTS / where)]
    assert wrong == [BENCH_SMOKE]
