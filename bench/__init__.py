"""The benchmarks: one runner, ``python -m bench [SCENARIO] [options]`` (docs/benchmarks.md).

Layout (dependencies flow one way: ``__main__`` -> ``scenarios`` -> ``harness``; the
harness imports no scenario, the runner finds scenarios by name):

* ``__main__.py``: the runner. Lists the scenarios, runs one, saves its results
  (``bench/results/NAME.json``), prints its section and with ``--write-docs`` puts it in
  docs/benchmarks.md; ``--render SAVED.json`` rewrites the section without measuring.
* ``harness/``: what scenarios share: brokers and records (``kafka``), Spark sessions and
  timed reads of every side (``spark``), CPU and memory (``procfs``), sources that read no
  Kafka (``const_source``), a driver-side member in its own process (``planner``), the
  report writer (``docs``).
* ``scenarios/NAME.py``: one per figure or table; ``scenarios/_NAME_*.py`` are pieces of
  one scenario (not listed).
* ``members.py``, ``sink_member.py``: member processes of a group and a plain consumer
  service, shared with the tests.

Adding a scenario (``scenarios/split.py`` is the model to copy):

1. ``bench/scenarios/NAME.py`` with a docstring whose first line names what it measures and
   whose body says the sides, the records and the rounds (``python -m bench`` lists the
   first line, ``python -m bench NAME --help`` shows the first paragraph);
2. ``SECTION``: the section of docs/benchmarks.md it writes, between
   ``<!-- SECTION:start -->`` and ``<!-- SECTION:end -->`` (added at the end of the page the
   first time), or ``None``;
3. ``add_arguments(parser)``: its options, with the documented run as the defaults;
4. ``run(args) -> dict``: start what it needs (``harness.kafka.broker``,
   ``harness.spark.spark_session``), measure, return JSON-able results; the runner adds
   ``command``, ``when``, ``load_before`` and ``load_after``;
5. ``render(results) -> str``: the section's Markdown from the results alone, naming
   ``results["command"]`` next to its figures; optionally ``child(spec)``, run in a fresh
   process by ``python -m bench NAME --child JSON``.

Then ``python -m bench NAME --write-docs``, and a line for it in README.md's benchmarks
section. Notes written by hand go after the section's end marker, where no run touches them.
"""
