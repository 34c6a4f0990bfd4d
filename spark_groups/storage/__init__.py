"""Where the tables and checkpoints live, and how they are read and written.

* :mod:`~spark_groups.storage.paths`: a user's path in the form delta-rs and pyarrow take;
* :mod:`~spark_groups.storage.object_stores`: the ``storage.*`` options and the guard on
  concurrent commits to object stores (its names are importable from here too);
* :mod:`~spark_groups.storage.files`: resolved paths as pyarrow file systems;
* :mod:`~spark_groups.storage.checkpoint`: Spark's checkpoint (offset and commit logs);
* :mod:`~spark_groups.storage.flow_checkpoints`: the checkpoint a Declarative Pipelines flow
  runs in now, its refresh, and ``flow_checkpoints`` (public as
  ``spark_groups.flow_checkpoints``);
* :mod:`~spark_groups.storage.replays`: replay notices in the checkpoint, which the sink plans
  a replayed batch from;
* :mod:`~spark_groups.storage.delta`: opening, creating, appending to and querying Delta tables;
* :mod:`~spark_groups.storage.snapshots`: ``LatestSnapshot``, a table kept open between uses and
  brought to its newest version;
* :mod:`~spark_groups.storage.transactions`: every app transaction of a table from one replay
  of its log, brought forward commit by commit;
* :mod:`~spark_groups.storage.maintenance_steps`: the maintenance steps every table shares;
* :mod:`~spark_groups.storage.commit_lock`: one commit at a time per process to a table that
  takes one writer only.
"""

from spark_groups.storage.object_stores import (
    STORAGE_PREFIX,
    azure_filesystem_args,
    check_commit_safety,
    gcs_filesystem_args,
    is_s3,
    s3_filesystem_args,
    storage_options_of,
)

__all__ = [
    "STORAGE_PREFIX",
    "azure_filesystem_args",
    "check_commit_safety",
    "gcs_filesystem_args",
    "is_s3",
    "s3_filesystem_args",
    "storage_options_of",
]
