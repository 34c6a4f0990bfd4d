"""The one place that talks to librdkafka (confluent-kafka).

* :mod:`~spark_groups.kafka.client`: client creation with scrubbed errors, and the client types
  the rest of the library uses;
* :mod:`~spark_groups.kafka.config`: layering defaults, the caller's settings and requirements;
* :mod:`~spark_groups.kafka.classify` and :mod:`~spark_groups.kafka.auth`: librdkafka's errors as
  typed errors;
* :mod:`~spark_groups.kafka.logs`: librdkafka's own log lines through Python logging, repeats
  folded (every client spark_groups creates gets one);
* :mod:`~spark_groups.kafka.watermarks`: log start and end offsets you can trust, over
  :mod:`~spark_groups.kafka.list_offsets` and :mod:`~spark_groups.kafka.confirmed_ends`;
* :mod:`~spark_groups.kafka.share_client`: the share consumer (KIP-932) as the ``kafka-share``
  source uses it: acknowledging records, a share group's settings.
"""
