"""Tansu keeps a departed group leader: members that join afterwards get no assignment.

A group's leader sends LeaveGroup while the group is rebalancing; Tansu removes the member
but keeps it as the leader, so every later JoinGroup names a member that is gone and every
SyncGroup ends in REBALANCE_IN_PROGRESS. Apache Kafka picks a new leader. See README.md
beside this file; run ``python -m bench.repro.tansu_leader --help``.
"""
