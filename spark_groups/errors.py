"""The exception hierarchy of spark_groups.

Every error the library raises on purpose is a :class:`SparkGroupsError`, so callers can
catch one type. Messages name the option, broker, topic or record at fault and never
contain secrets (see :func:`spark_groups.secrets.redact`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from spark_groups.topic_partition import TopicPartition


class SparkGroupsError(Exception):
    """Base class of every error raised by spark_groups."""


class OptionError(SparkGroupsError, ValueError):
    """An option is missing, unknown, malformed or conflicts with another one."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(f"option '{option}': {problem}")


class UnsupportedSparkError(SparkGroupsError, ImportError):
    """The running pyspark cannot host this package's source and sink: ``version`` is the
    running one, ``supported`` the release lines that work (docs/spark-versions.md)."""

    def __init__(self, version: str | None, supported: tuple[str, ...]) -> None:
        self.version = version
        self.supported = supported
        found = (
            "pyspark is not installed"
            if version is None
            else f"pyspark {version} has no Python data source API (pyspark.sql.datasource, "
            "new in Spark 4.0)"
        )
        super().__init__(
            f"{found}: spark_groups runs on Spark {', '.join(supported)}. Install one of them "
            "(pip install 'spark-groups[spark]' brings the newest) or use a runtime that "
            "ships one (Databricks Runtime 17.3 LTS or later)"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.version, self.supported))


class OptionNeedsSparkError(OptionError):
    """An option (or a missing one) cannot work on the running Spark: ``spark_version`` is
    the running version, ``needs`` what would make it work."""

    def __init__(self, option: str, spark_version: str, needs: str) -> None:
        super().__init__(option, f"on Spark {spark_version}: {needs}")
        self.spark_version = spark_version
        self.needs = needs

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.option, self.spark_version, self.needs))


class StoragePathError(OptionError):
    """A table or checkpoint path spark_groups cannot reach: a scheme neither delta-rs nor
    pyarrow reads, ``dbfs:/`` where DBFS is not mounted, or a store this pyarrow build has no
    file system for. ``option`` is the option that gave it, ``path`` the path as given."""

    def __init__(self, option: str, path: str, problem: str) -> None:
        super().__init__(option, f"{path!r}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.option, self.path, self.problem))


class LocalTableOnClusterError(OptionError):
    """The ``delta-group`` sink's table (option ``path``) is a path on the local disk, and the
    query runs on a cluster whose executors are other processes than the driver (Spark master
    ``master``: standalone, YARN, Kubernetes). Each executor would write its data files to its
    own machine's disk, where the driver's commit and every reader would not find them.
    Raised by the first task of the first batch, before any file is written or anything
    committed. ``path`` is the table as given, ``master`` the Spark master."""

    def __init__(self, path: str, master: str) -> None:
        self.path = path
        self.master = master
        super().__init__(
            "path",
            f"the sink table {path!r} is a local path, but the query runs on a cluster "
            f"(spark.master {master!r}): each executor would write its data files to its own "
            "machine's disk. Use an object store URI (s3://bucket/table, with the storage.* "
            "options), a shared mount every node sees (/dbfs/..., /Volumes/...), or, for a "
            "local path that is such a mount on every node (NFS), set the sink option "
            "sharedMount=true (docs/storage.md, 'On a cluster'); nothing was written or "
            "committed",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.master))


class PipelineMismatchError(OptionError):
    """The ``delta-group`` sink and the ``kafka-group`` source that planned its batch name a
    setting they both take differently: the sink's ``option`` is ``sink_value``, the
    source's ``source_option`` is ``source_value`` (batch ``batch``, a Spark batch id). The
    sink takes the value from the source; nothing of the batch is written or committed."""

    def __init__(
        self, option: str, sink_value: str, source_option: str, source_value: str, batch: int
    ) -> None:
        self.sink_value = sink_value
        self.source_option = source_option
        self.source_value = source_value
        self.batch = batch
        super().__init__(
            option,
            f"the delta-group sink's {option} {sink_value!r} differs from {source_option} "
            f"{source_value!r} of the kafka-group source that planned Spark batch {batch}. "
            f"The sink takes its {option} from the source: leave {option} out of the sink "
            f"(or make it {source_value!r}), or change the source's {source_option} if that "
            "is the one at fault. Nothing of the batch was written to the table or committed",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self.option, self.sink_value, self.source_option, self.source_value, self.batch),
        )


class SinkNotWrittenError(OptionError):
    """Spark finished batch ``batch`` of a source with ``sink.table``, but the table at
    ``path`` does not hold ``partitions`` of it although their claims there did not move on
    (still the batch's tokens, or none): the query's sink
    does not write that table through ``delta-group`` (``format("delta")``,
    ``foreachBatch`` or another table). Nothing of the batch is committed to Kafka."""

    def __init__(self, path: str, batch: int, partitions: Iterable[TopicPartition]) -> None:
        self.path = path
        self.batch = batch
        self.partitions = tuple(sorted(partitions))
        shown = ", ".join(str(tp) for tp in self.partitions[:10])
        more = f" and {len(self.partitions) - 10} more" if len(self.partitions) > 10 else ""
        super().__init__(
            "sink.table",
            f"Spark finished batch {batch}, but the delta-group table {path} does not hold "
            f"{shown}{more} of it, and their claims there did not move on: the "
            "query's sink does not write this table through the delta-group sink "
            "(format('delta'), foreachBatch or another path?). sink.table is the "
            "delta-group sink's table: write with .writeStream.format('delta-group') (it "
            "takes the table and the group from this source), or remove sink.table. Nothing "
            "of the batch was committed to Kafka; restarted with the same checkpoint after "
            "the fix, the query commits it first",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.batch, self.partitions))


class GroupTableMismatchError(OptionError):
    """Consumer group ``group`` last committed ``partition`` from a query writing the
    ``delta-group`` table ``other`` (``by``: who, from the commit's metadata), while this
    query's ``sink.table`` is ``table``: one group feeds one table, or neither table holds
    the group's records once (and the claims of one cannot fence a member of the other)."""

    def __init__(
        self, group: str, partition: TopicPartition, table: str, other: str, by: str
    ) -> None:
        self.group = group
        self.partition = partition
        self.table = table
        self.other = other
        self.by = by
        super().__init__(
            "sink.table",
            f"group {group} last committed {partition} from a query writing the delta-group "
            f"table {other} ({by}); this query's sink.table is {table}. One group feeds one "
            f"delta-group table: give this query a group.id of its own, or set sink.table "
            f"to {other}. To move the group to {table} for good, stop every member of the "
            f"group and set its offsets with spark-groups reset {group} (docs/cli.md): the "
            "next member resumes from those",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.group, self.partition, self.table, self.other, self.by))


class BrokerUnreachableError(SparkGroupsError):
    """No broker of ``kafka.bootstrap.servers`` answered within the allowed time.

    ``servers`` are the bootstrap servers asked (empty when unknown) and ``waited_s`` how long
    the caller waited (None when it did not wait).
    """

    def __init__(self, message: str, *, servers: str = "", waited_s: float | None = None) -> None:
        super().__init__(message)
        self.servers = servers
        self.waited_s = waited_s


class TopicNotFoundError(SparkGroupsError):
    """A subscribed topic (or one of its partitions) does not exist on the cluster.

    ``topics`` names the topics not found and ``servers`` the cluster asked.
    """

    def __init__(self, message: str, *, topics: Iterable[str] = (), servers: str = "") -> None:
        super().__init__(message)
        self.topics = tuple(topics)
        self.servers = servers


class GroupMembershipError(SparkGroupsError):
    """The driver's consumer-group member failed (could not join, was closed, or crashed).

    ``group`` is the consumer group's id (empty when unknown).
    """

    def __init__(self, message: str, *, group: str = "") -> None:
        super().__init__(message)
        self.group = group


class OneWriterError(GroupMembershipError):
    """A member of ``group`` found others in the group while its ``tables`` are on a store
    committed to as check-then-rename (``opt_in``: ``allow_unsafe_rename`` or
    ``aws_s3_allow_unsafe_rename``), safe for one writer only; ``others`` names them
    (``client.id@host``). It stopped before reading or writing anything."""

    def __init__(
        self, group: str, tables: Sequence[str], opt_in: str, others: Sequence[str], waited_s: float
    ) -> None:
        self.tables = tuple(tables)
        self.opt_in = opt_in
        self.others = tuple(others)
        self.waited_s = waited_s
        super().__init__(
            f"consumer group '{group}' has other members ({', '.join(self.others)}) after "
            f"{waited_s:.0f} s, and {', '.join(self.tables)} are committed to as "
            f"check-then-rename (storage.{opt_in}=true), which is safe for one writer only: "
            "this member stopped before reading or writing anything, so that it cannot "
            "overwrite their commits. Run one member of the group on these tables, or put them "
            "on the object store itself (abfss://, gs://, or s3:// with "
            "storage.aws_conditional_put=etag), where every member commits safely "
            '(docs/storage.md, "One writer"). A member that was killed leaves the group when '
            "its session ends (session.timeout.ms): run this one again after that",
            group=group,
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self.group, self.tables, self.opt_in, self.others, self.waited_s),
        )


class CommitError(SparkGroupsError):
    """Offsets could not be committed to Kafka.

    ``partitions`` are those the commit was for (empty when unknown) and ``code`` the Kafka
    error code of the refusal (None when unknown).
    """

    def __init__(
        self,
        message: str,
        *,
        partitions: Iterable[TopicPartition] = (),
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.partitions = frozenset(partitions)
        self.code = code


class StaleGenerationError(CommitError):
    """Kafka refused an offset commit because this member's generation (classic protocol) or
    member epoch (KIP-848) is no longer current.

    ``generation`` is the member's generation the commit went out under, ``partitions`` those
    it tried to commit, and ``code`` the Kafka error code of the refusal (None when unknown).
    ``ILLEGAL_GENERATION``, ``REBALANCE_IN_PROGRESS`` and ``STALE_MEMBER_EPOCH`` from a member
    that is still in the group mean a rebalance moved on while the commit was in flight
    (:attr:`transient`); the others (``UNKNOWN_MEMBER_ID``, ``FENCED_MEMBER_EPOCH``,
    ``FENCED_INSTANCE_ID``) mean the member was fenced.
    """

    #: Kafka's error codes that mean "a rebalance moved on", not "you were fenced":
    #: ILLEGAL_GENERATION (22), REBALANCE_IN_PROGRESS (27), STALE_MEMBER_EPOCH (113).
    TRANSIENT_CODES = frozenset({22, 27, 113})

    def __init__(
        self,
        message: str,
        *,
        generation: int = -1,
        partitions: Iterable[TopicPartition] = (),
        code: int | None = None,
    ) -> None:
        super().__init__(message, partitions=partitions, code=code)
        self.generation = generation

    @property
    def transient(self) -> bool:
        """True when the member may commit again once it has the group's new generation."""
        return self.code in self.TRANSIENT_CODES


class LedgerError(SparkGroupsError):
    """The Delta offsets ledger is unusable (wrong table, wrong group, unreadable).

    ``path`` is the table at fault (empty when unknown).
    """

    #: The source option that names the ledger's path.
    option = "offsets.table"

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class DataLossError(SparkGroupsError):
    """Records in a planned offset range can no longer be read (deleted, or the log moved).

    ``partition`` and ``[from_offset, until_offset)`` are the records lost, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        partition: TopicPartition | None = None,
        from_offset: int | None = None,
        until_offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset


class SchemaRegistryError(SparkGroupsError):
    """The schema registry at ``url`` (credentials left out) could not answer: unreachable
    (``waited_s``: for how long it was retried), refusing the credentials, or without the
    subject, version or schema id asked for (``subject``, ``schema_id``)."""

    def __init__(
        self,
        message: str,
        *,
        url: str,
        subject: str | None = None,
        schema_id: int | None = None,
        waited_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.subject = subject
        self.schema_id = schema_id
        self.waited_s = waited_s

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), self.__dict__))


class RecordDecodeError(SparkGroupsError):
    """The record at ``topic``-``partition``@``offset`` could not be decoded from its
    ``column`` (``key`` or ``value``) in the format asked for: no Confluent header, an unknown
    schema id, a writer schema the reader schema cannot resolve, or bytes that do not parse
    (``reason``). ``schema_id`` is the id in its header (None without one)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        column: str,
        schema_id: int | None,
        reason: str,
    ) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.column, self.schema_id, self.reason = column, schema_id, reason
        schema = f"schema id {schema_id}" if schema_id is not None else "no schema id"
        super().__init__(
            f"cannot decode the {column} of record {topic}-{partition}@{offset} ({schema}): "
            f"{reason}. To get past it, set the source option deadLetter.table (such records "
            "go there with the error and the query goes on) and restart the query"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self.topic, self.partition, self.offset, self.column, self.schema_id, self.reason),
        )


def _rebuild(cls: type[SparkGroupsError], message: str, state: dict[str, object]) -> Exception:
    """Unpickle an error with keyword-only data (``__reduce__``)."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class NoOffsetForTimestampError(SparkGroupsError):
    """A partition has no record at or after the timestamp it was told to start from.

    ``partition`` is the partition, ``timestamp_ms`` the timestamp asked and ``option`` the
    option that asked it (``startingTimestamp`` or ``startingOffsetsByTimestamp``).
    """

    def __init__(self, partition: TopicPartition, timestamp_ms: int, option: str) -> None:
        super().__init__(
            f"partition {partition} has no record at or after timestamp {timestamp_ms} "
            f"({option}); set startingOffsetsByTimestampStrategy=latest to start such "
            "partitions at the log end, or give an earlier timestamp"
        )
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.option = option


class SinkError(SparkGroupsError):
    """The exactly-once Delta sink (``delta-group``) cannot write a batch: bad options, a
    pipeline without the source's ``topic``/``partition``/``offset`` columns, rows outside
    the batch's planned offsets, a data file missing before the commit, an incompatible table,
    or a commit that kept failing on concurrent commits. Nothing of the batch was committed."""


class SinkGapError(SinkError):
    """A batch starts past the offset the sink table expects for a partition: committing it
    would leave records that were never written (a gap) in the table.

    ``gaps`` maps each such partition to its missing offsets ``(table's next, batch's from)``.
    """

    def __init__(
        self, message: str, *, gaps: Mapping[TopicPartition, tuple[int, int]] | None = None
    ) -> None:
        super().__init__(message)
        self.gaps = dict(gaps or {})


class SinkClaimError(SinkError):
    """A partition's claim in the sink table could not be taken or released in time (the
    table kept changing, or could not be read or written). ``path`` is the table,
    ``partitions`` the partitions at fault. Nothing about them was decided: a member that
    was leaving commits what one snapshot of the table holds of them (a batch still in
    flight may land after that and be read again by their next owner, at least once), one
    that was resuming reads them without a claim."""

    def __init__(self, message: str, *, path: str, partitions: Iterable[TopicPartition]) -> None:
        super().__init__(message)
        self.path = path
        self.partitions = tuple(sorted(partitions))


class SinkFeatureError(SinkError):
    """An existing sink table uses Delta table features the sink cannot honour when it appends
    its own Parquet files (column mapping, generated or identity columns, CHECK constraints,
    row tracking, ...). ``path`` is the table, ``features`` the features at fault. Nothing was
    committed; the error repeats on every restart until the query writes to another table."""

    def __init__(self, path: str, features: Sequence[str]) -> None:
        super().__init__(
            f"sink {path}: the table uses Delta table feature(s) {', '.join(features)}, which "
            "the delta-group sink cannot honour (it appends plain Parquet files with delta-rs); "
            "nothing was committed. Write to a new table (the sink creates one), or to a table "
            "created without these features (docs/sink.md, 'Tables made by other engines')"
        )
        self.path = path
        self.features = tuple(features)


class SinkTablePropertyError(SinkError):
    """An existing sink table sets a table property that breaks the sink's exactly-once.

    ``path`` is the table, ``property`` the property at fault and ``value`` its value. Nothing
    was committed; the error repeats on every restart until the property is unset."""

    def __init__(self, path: str, property: str, value: str, why: str) -> None:
        super().__init__(
            f"sink {path}: the table sets {property}={value}: {why}; nothing was committed. "
            f"Unset it (ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{property}')) or "
            "write to another table"
        )
        self.path = path
        self.property = property
        self.value = value


class GroupActiveError(SparkGroupsError):
    """An operation that needs an empty consumer group (``spark-groups reset``) found the
    group with active members; stop every member (every query and consumer) first."""


class AuthenticationError(SparkGroupsError):
    """The brokers refused this client's credentials (SASL): a wrong user name or password, a
    mechanism the listener does not offer, or ``kafka.security.protocol`` not matching the
    listener. Its attributes say which user tried where; the password is never kept."""

    def __init__(self, servers: str, username: str, mechanism: str, detail: str) -> None:
        self.servers = servers
        self.username = username
        self.mechanism = mechanism
        self.detail = detail
        super().__init__(
            f"SASL authentication failed for user {username!r} (mechanism {mechanism}) on "
            f"{servers}: {detail}. Check kafka.sasl.username and kafka.sasl.password, and that "
            "kafka.sasl.mechanism and kafka.security.protocol match the broker's listener on "
            "kafka.bootstrap.servers"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.servers, self.username, self.mechanism, self.detail))


class AuthorizationError(SparkGroupsError):
    """Kafka's authorizer denied this client an operation on a topic or a consumer group:
    an ACL is missing. ``resource_type`` is ``"topic"`` or ``"group"``, ``resource`` its
    name, ``operation`` the ACL operation to allow (``READ``), ``principal`` who was denied
    (``User:<name>``, or ``None`` without SASL)."""

    def __init__(
        self,
        resource_type: str,
        resource: str,
        operation: str,
        principal: str | None,
        servers: str,
        detail: str,
    ) -> None:
        self.resource_type = resource_type
        self.resource = resource
        self.operation = operation
        self.principal = principal
        self.servers = servers
        self.detail = detail
        who = principal or "this client"
        flag = "--topic" if resource_type == "topic" else "--group"
        super().__init__(
            f"not authorized: {who} may not {operation} {resource_type} {resource!r} on "
            f"{servers} ({detail}). Add an ACL allowing {operation} on {resource_type} "
            f"{resource!r} for {who}, e.g. kafka-acls.sh --add --allow-principal "
            f"{principal or 'User:<name>'} --operation {operation} {flag} {resource}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (
                self.resource_type,
                self.resource,
                self.operation,
                self.principal,
                self.servers,
                self.detail,
            ),
        )


class MaintenanceError(SparkGroupsError):
    """Compaction or vacuum of a table (``spark-groups optimize`` / ``vacuum``) failed or was
    refused; nothing of it was committed unless the message says so. ``path`` is the table."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class MaintenanceRunningError(MaintenanceError):
    """Another compaction of the same table holds its maintenance lease (two concurrent
    compactions would each re-add the same rows). ``holder`` is who took the lease,
    ``expires`` when it lapses (seconds since the epoch)."""

    def __init__(self, message: str, *, path: str, holder: str, expires: float) -> None:
        super().__init__(message, path=path)
        self.holder = holder
        self.expires = expires
