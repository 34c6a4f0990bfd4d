"""What the tests and the benchmarks share: one package, imported as ``support``.

* ``broker``: which broker the run uses, fresh names (:func:`~support.broker.unique`), topics,
  producing, committed offsets, log ends, and :func:`~support.broker.wait_until`;
* ``options``: group members' settings (kafka-group source options, plain consumers');
* ``spark``: kafka-group streams and delta-group queries in the test's Spark session;
* ``producers``: producers running beside a test, in a thread;
* ``tables``: what landed in a table, read back without Spark;
* ``s3``: a plain signed PUT to the tests' S3 server;
* ``launch``: the one launcher of member processes (:class:`~support.launch.MemberProcess`);
* ``members``: the member programs' launchers (:class:`~support.members.Member`, ...);
* ``services``: a plain consumer service in a group, in a thread;
* ``programs/``: the member programs themselves.

The tests find it on ``sys.path`` (pytest puts ``tests/`` there for ``tests/conftest.py``); the
benchmarks find it installed (``pip install -e tests/support``, its own ``pyproject.toml``).
The dependency goes one way: ``bench`` imports ``support``; nothing here imports ``bench``.
"""
