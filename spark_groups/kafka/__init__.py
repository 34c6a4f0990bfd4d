"""The one place that talks to librdkafka (confluent-kafka).

* :mod:`~spark_groups.kafka.secrets`: which settings are secrets; redacting and scrubbing;
* :mod:`~spark_groups.kafka.watermarks`: log start and end offsets you can trust.
"""
