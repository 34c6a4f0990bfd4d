"""The benchmarks: one runner, ``python -m bench [SCENARIO] [options]`` (docs/benchmarks.md).

Layout (dependencies flow one way: ``__main__`` -> ``scenarios`` -> ``harness``; the runner
finds scenarios by name):

* ``__main__.py``: the runner: lists, runs (results in ``bench/results/NAME.json``), prints
  and with ``--write-docs`` writes a section; ``--render SAVED.json`` without measuring.
* ``harness/``: brokers and records (``kafka``), Spark sessions and timed reads (``spark``),
  CPU and memory (``procfs``), sources that read no Kafka (``const_source``), a driver-side
  member in its own process (``planner``), the report writer (``docs``).
* ``scenarios/NAME.py``: one per figure or table; ``scenarios/_NAME_*.py`` are its pieces.

The tests' support package (``tests/support``, imported as ``support``: topics, waiting, the
member programs and their launcher, a plain consumer service) is the benchmarks' too: install
it beside the project (``pip install -e tests/support``; pytest finds it beside the tests).
Tests import nothing from here (``tests/unit/test_layers.py``), except the benchmark's own
smoke test.

A scenario (copy ``scenarios/split.py``) has a docstring whose first line names what it
measures (``python -m bench`` lists it) and whose first paragraph ``--help`` shows, saying
the sides, the records and the rounds; ``SECTION`` (its ``<!-- SECTION:start -->`` /
``<!-- SECTION:end -->`` part of docs/benchmarks.md, appended the first time, or ``None``);
``add_arguments(parser)`` with the documented run as defaults; ``run(args) -> dict`` (JSON-able;
the runner adds ``command``, ``when``, ``load_before``, ``load_after``); ``render(results) ->
str`` naming ``results["command"]`` next to its figures; optionally ``child(spec)``, run in a
fresh process by ``python -m bench NAME --child JSON``. Then ``python -m bench NAME
--write-docs``. Hand-written notes go after a section's end marker; what was tried and retired
goes to docs/history.md.
"""
