"""The driver side of a query: its consumer-group membership and offset bookkeeping.

* :mod:`~spark_groups.group.stream`: ``GroupStream``, the protocol as the numbered steps Spark
  drives (join, assigned, resume, safe point, plan, revoked, leave);
* its parts: :mod:`~spark_groups.group.bookkeeping` (what they share, under one lock),
  :mod:`~spark_groups.group.partitions` (one state per owned partition),
  :mod:`~spark_groups.group.arrivals` (where newly assigned partitions resume, with
  :mod:`~spark_groups.group.resume` and :mod:`~spark_groups.group.gaps`),
  :mod:`~spark_groups.group.planner` (pure planning), :mod:`~spark_groups.group.commit` (the
  commit path: Kafka, then the ledger), :mod:`~spark_groups.group.barrier` (the revocation
  barrier, with :mod:`~spark_groups.group.durable`), :mod:`~spark_groups.group.available_now`,
  :mod:`~spark_groups.group.first_assignment`, :mod:`~spark_groups.group.history` and
  :mod:`~spark_groups.group.sigterm`;
* :mod:`~spark_groups.group.member`: the group member, a facade over its parts ``owner`` (one
  thread uses the consumer and serves other threads' calls), ``callbacks`` (librdkafka's
  rebalance and error callbacks as listener calls), ``commits`` (offsets committed to and
  fetched from Kafka, refusals as typed errors) and ``topics`` (the subscription).
"""
