"""Share groups (KIP-932) into Delta: the parts of the experimental ``kafka-share`` source.

Its Spark adapter, registered by :func:`spark_groups.register`, is
:mod:`spark_groups.sources.kafka_share`; its options are :mod:`spark_groups.options.share`
(docs/share-groups.md).

* :mod:`~spark_groups.share.read`: one reading task: one acquiring poll within a time budget,
  its records as one Arrow batch;
* :mod:`~spark_groups.share.consumers`: a worker's share consumers and its one
  ``Acknowledger`` per sink table;
* :mod:`~spark_groups.share.acks`: ``Acknowledger``, which ACCEPTs an attempt's records once a
  commit of the sink's table names it and RELEASEs them when the batch landed without it;
* :mod:`~spark_groups.share.dead_letters`: records on their last delivery, into the
  dead-letter table, then REJECTed.
"""
