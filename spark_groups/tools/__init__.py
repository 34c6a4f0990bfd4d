"""Operator tools: the ``spark-groups`` command, and the processes tests and demos start.

Nothing in the library's streaming path imports this package (docs/cli.md).

* :mod:`~spark_groups.tools.cli`: the ``spark-groups`` command, thin: parsing, tables, exit
  codes; :mod:`~spark_groups.tools.versions`: ``--version``, the versions a support case needs;
* :mod:`~spark_groups.tools.describe`: a group's state and its positions per partition;
* :mod:`~spark_groups.tools.reset`: setting a stopped group's position (Kafka and the ledger);
* :mod:`~spark_groups.tools.accept_gap`: ``accept-gap``, an operator's decision that a
  partition's missing records stay out of the sink's table;
* :mod:`~spark_groups.tools.maintain`: ``optimize`` and ``vacuum`` of a sink table;
* :mod:`~spark_groups.tools.timeline`: ledger rows and rebalance events in time order;
* :mod:`~spark_groups.tools.lag` and :mod:`~spark_groups.tools.lag_plot`: lag at commit time
  from the ledger, its series and their PNG;
* :mod:`~spark_groups.tools.demo` (README command one) and
  :mod:`~spark_groups.tools.pipeline_demo` (the example pipeline on the embedded broker);
* :mod:`~spark_groups.tools.processes`: ``ManagedProcess`` / ``Launcher``, a child process with
  a log file, stopped with its signal then SIGKILL; the launchers on it:
  :mod:`~spark_groups.tools.tansu` (``EmbeddedBroker``), :mod:`~spark_groups.tools.kafka_broker`
  (a single-node Apache Kafka) and :mod:`~spark_groups.tools.s3_server` (S3Proxy);
* :mod:`~spark_groups.tools.spark_jars`: Spark's settings for the jars of ``bash jars/fetch``;
  :mod:`~spark_groups.tools.checkout`: where the checkout's ``jobs/``, ``conf/`` and
  ``.cache/`` are.
"""
