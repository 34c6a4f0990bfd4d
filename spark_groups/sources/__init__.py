"""The Spark adapters of the two sources, which :func:`spark_groups.register` registers; thin
(the sink's is :mod:`spark_groups.sink.spark`; all build on :mod:`spark_groups.spark`).

* :mod:`~spark_groups.sources.kafka_group`: ``KafkaGroupDataSource``, the ``kafka-group``
  source (its driver is :mod:`spark_groups.group`, its executor side :mod:`spark_groups.read`);
* :mod:`~spark_groups.sources.kafka_share`: ``KafkaShareDataSource``, the experimental
  ``kafka-share`` source: batch numbers and ``tasks`` share consumers a batch
  (:mod:`spark_groups.share`, docs/share-groups.md).
"""
