"""The driver side of a query: its consumer-group membership and offset bookkeeping.

* :mod:`~spark_groups.group.member`: the group member (one owner thread polls a paused
  consumer, runs rebalance callbacks, serves other threads' calls from a queue);
* :mod:`~spark_groups.group.planner`: pure planning, positions + log ends -> ranges;
* :mod:`~spark_groups.group.stream`: the protocol, as the sequence of steps Spark drives;
* :mod:`~spark_groups.group.history`: the rebalance-history table.
"""
