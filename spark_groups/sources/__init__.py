"""The Spark adapters of the two sources, which :func:`spark_groups.register` registers; thin.

* :mod:`~spark_groups.sources.kafka_group`: ``KafkaGroupDataSource``, the ``kafka-group``
  source (its driver is :mod:`spark_groups.group`, its executor side :mod:`spark_groups.read`);
* :mod:`~spark_groups.sources.kafka_share`: ``KafkaShareDataSource``, the experimental
  ``kafka-share`` source (:mod:`spark_groups.share`, docs/share-groups.md).

The sink's adapter is :mod:`spark_groups.sink.spark`; all build on :mod:`spark_groups.spark`.
"""
