"""Operator tools around a group: the ``spark-groups`` command and what it is built from.

``cli`` (the command, thin), ``describe`` (a group's state per partition), ``reset``
(setting a stopped group's position), ``timeline`` (ledger rows and rebalance events in
time order), ``lag_plot`` (lag series and their PNG), ``demo`` (README command one) and
``tansu`` (a throw-away Tansu broker for demos and tests). Nothing in the library's
streaming path imports this package.
"""
