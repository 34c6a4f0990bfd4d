"""The driver side of a query: its consumer-group membership and offset bookkeeping.

* :mod:`~spark_groups.group.stream`: ``GroupStream``, the protocol's steps as Spark drives them
  (join, assigned, resume, safe point, plan, revoked, leave);
* :mod:`~spark_groups.group.state`: the driver's state, touched only on the member's owner
  thread, and ``OnOwner``, how other threads ask that thread;
* the steps' parts: :mod:`~spark_groups.group.partitions` (one state per owned partition),
  :mod:`~spark_groups.group.arrivals` (where newly assigned partitions resume, with
  :mod:`~spark_groups.group.resume`, :mod:`~spark_groups.group.holds` and
  :mod:`~spark_groups.group.refresh`), :mod:`~spark_groups.group.replay` (a batch Spark runs
  again), :mod:`~spark_groups.group.log_ends` (the ends a plan reads up to, AvailableNow's
  targets), :mod:`~spark_groups.group.planner` (pure planning),
  :mod:`~spark_groups.group.committer` (Kafka, then the ledger, with
  :mod:`~spark_groups.group.ledger_behind`), :mod:`~spark_groups.group.claims` (claims in the
  sink's table, through :mod:`~spark_groups.group.arbiter`), :mod:`~spark_groups.group.barrier`
  (the revocation barrier, with :mod:`~spark_groups.group.durable`),
  :mod:`~spark_groups.group.first_assignment`, :mod:`~spark_groups.group.one_writer` (one
  member where a table takes one writer only), :mod:`~spark_groups.group.history` and
  :mod:`~spark_groups.group.sigterm`;
* :mod:`~spark_groups.group.member`: the group member, a facade over ``owner`` (one thread
  uses the consumer and serves other threads' calls), ``callbacks`` (librdkafka's rebalance and
  error callbacks as listener calls), ``commits`` (offsets committed to and fetched from
  Kafka, refusals as typed errors) and ``topics`` (the subscription).
"""
