"""The driver side of a query: its consumer-group membership and offset bookkeeping.

* :mod:`~spark_groups.group.member`: the group member, a façade over its parts:
  :mod:`~spark_groups.group.owner` (one owner thread uses the consumer and serves other
  threads' calls from a queue), :mod:`~spark_groups.group.callbacks` (librdkafka's rebalance
  and error callbacks as listener calls, and the assignment they leave),
  :mod:`~spark_groups.group.commits` (offsets committed to and fetched from Kafka, refusals as
  typed errors) and :mod:`~spark_groups.group.topics` (the subscription and its topic checks);
* :mod:`~spark_groups.group.planner`: pure planning, positions + log ends -> ranges;
* :mod:`~spark_groups.group.stream`: the protocol, as the sequence of steps Spark drives;
* :mod:`~spark_groups.group.history`: the rebalance-history table.
"""
