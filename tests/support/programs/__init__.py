"""The member programs, each run as ``python PROGRAM.py ARGS`` by :mod:`support.launch`:

* ``sink_member.py``: a kafka-group query into a sink (delta-group, Spark's Delta or parquet
  sink, or a MERGE), its own Spark application;
* ``sim_member.py``: the product's driver, read path and sink without Spark (the crash
  matrix's member: it starts in a second);
* ``frozen_member.py``: a driver-side member for the fencing tests, frozen by the test;
* ``alo_consumer.py``: a plain at-least-once consumer (the chaos test).

They import nothing of the tests; what a test needs of one (``sink_member.DEFAULT_SQL``) it
imports from here.
"""
