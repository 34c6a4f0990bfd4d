"""The one runner: ``python -m bench [SCENARIO] [options]`` from the repository root.

Without a scenario it lists them. With one it runs it (``run``), saves the results
(``bench/results/SCENARIO.json``, or ``--out``), prints the section it makes (``render``) and,
with ``--write-docs``, puts it in docs/benchmarks.md. ``--render SAVED.json`` makes the
section again from saved results without measuring anything.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import shlex
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import scenarios
from bench.harness import docs
from bench.harness.procfs import loads_text


def names() -> dict[str, str]:
    """Every scenario and the first line of its docstring (read, not imported)."""
    out = {}
    for path in sorted(Path(scenarios.__path__[0]).glob("[!_]*.py")):  # _NAME: pieces
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out[path.stem] = doc.splitlines()[0] if doc else ""
    return out


def parser_for(name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The scenario's options and the runner's own."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench {name}", description=(module.__doc__ or "").split("\n\n")[0]
    )
    module.add_arguments(parser)
    runner = parser.add_argument_group("the runner")
    section = getattr(module, "SECTION", None)
    if section:
        runner.add_argument(
            "--write-docs", action="store_true", help=f"write the {section} section"
        )
    runner.add_argument("--render", metavar="SAVED", help="the section from saved results")
    runner.add_argument("--out", default=str(docs.RESULTS / f"{name}.json"), help="results")
    if hasattr(module, "child"):
        runner.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc)."""
    argv = sys.argv[1:] if argv is None else argv
    found = names()
    if argv and argv[0] not in found and argv[0].replace("-", "_") in found:
        argv = [argv[0].replace("-", "_"), *argv[1:]]  # python -m bench long-run
    if not argv or argv[0] in ("-h", "--help", "list") or argv[0] not in found:
        if argv and argv[0] not in ("-h", "--help", "list"):
            print(f"no scenario {argv[0]!r}", file=sys.stderr)
        print(__doc__.split("\n\n")[0] + "\n\nscenarios:")
        for name, line in found.items():
            print(f"  {name:14} {line}")
        return 0 if not argv or argv[0] in ("-h", "--help", "list") else 2
    name = argv[0]
    # Spark's Python workers, reader processes and the scenarios' children import bench too.
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(docs.ROOT), path) if p)
    module = importlib.import_module(f"bench.scenarios.{name}")
    args = parser_for(name, module).parse_args(argv[1:])
    if getattr(args, "child", None):
        module.child(json.loads(args.child))
        return 0
    if args.render:
        results: dict[str, Any] = docs.load(Path(args.render))
    else:
        results = {
            "command": shlex.join(["python", "-m", "bench", *argv]),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": loads_text(),
        }
        results.update(module.run(args))
        results.setdefault("load_after", loads_text())
        docs.save(results, Path(args.out))
    text = module.render(results)
    print(text)
    if getattr(args, "write_docs", False):
        docs.replace_section(module.SECTION, text)
        print(f"wrote the {module.SECTION} section of {docs.PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
