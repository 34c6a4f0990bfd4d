"""Option parsing: every bad input gives an OptionError naming the option."""

from __future__ import annotations

import pytest

from spark_groups.errors import OptionError
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.starting import EARLIEST, LATEST
from spark_groups.options import parse_options, validate_client_config
from spark_groups.secrets import is_secret, redact, scrub

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "group.id": "etl"}


def with_(**changes: str | None) -> dict[str, str]:
    opts = dict(BASE)
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            opts.pop(key, None)
        else:
            opts[key] = value
    return opts


def test_minimal_options_and_defaults() -> None:
    o = parse_options(BASE)
    assert o.group_id == "etl"
    assert o.topics == ("orders",)
    assert o.assignment_strategy == "cooperative-sticky"
    assert o.starting_offsets.default == LATEST
    assert o.max_offsets_per_trigger is None
    assert o.fail_on_data_loss is True
    assert o.records_per_task == 100_000
    assert o.kafka == {"bootstrap.servers": "127.0.0.1:9092"}


def test_split_options_as_spark_names_them() -> None:
    o = parse_options(BASE)
    assert (o.min_partitions, o.max_records_per_partition) == (None, None)
    o = parse_options({**BASE, "minpartitions": "64", "maxRecordsPerPartition": " 500000 "})
    assert (o.min_partitions, o.max_records_per_partition) == (64, 500_000)


def test_records_per_task() -> None:
    assert parse_options(with_(recordsPerTask="5000")).records_per_task == 5000
    assert parse_options(with_(recordsPerTask=" 0 ")).records_per_task == 0  # one per range
    assert parse_options({**BASE, "recordspertask": "7"}).records_per_task == 7


def test_read_path() -> None:
    assert parse_options(BASE).read_path == "auto"
    assert parse_options(with_(readPath="Python")).read_path == "python"
    assert parse_options({**BASE, "readpath": " native "}).read_path == "native"


def test_keys_are_case_insensitive_as_spark_lowercases_them() -> None:
    o = parse_options(
        {k.lower(): v for k, v in with_(maxOffsetsPerTrigger="50", includeHeaders="true").items()}
    )
    assert o.max_offsets_per_trigger == 50
    assert o.include_headers is True


def test_kafka_prefixed_group_id_is_accepted() -> None:
    o = parse_options(with_(group__id=None, kafka__group__id="via-kafka"))
    assert o.group_id == "via-kafka"
    assert "group.id" not in o.kafka


def test_member_and_reader_configs() -> None:
    o = parse_options(
        with_(
            group__instance__id="job-1",
            kafka__session__timeout__ms="6000",
            kafka__fetch__min__bytes="1",
        )
    )
    member = o.member_config()
    assert member["group.id"] == "etl"
    assert member["group.instance.id"] == "job-1"
    assert member["enable.auto.commit"] == "false"
    assert member["session.timeout.ms"] == "6000"
    reader = o.reader_config()
    assert "group.instance.id" not in reader  # executors never join the group
    assert "session.timeout.ms" not in reader
    assert reader["fetch.min.bytes"] == "1"


def test_group_protocol_consumer_member_config() -> None:
    classic = parse_options(BASE).member_config()
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    assert "group.protocol" not in classic
    o = parse_options({**BASE, "group.protocol": "Consumer", "group.remote.assignor": "range"})
    assert (o.group_protocol, o.remote_assignor) == ("consumer", "range")
    member = o.member_config()
    assert member["group.protocol"] == "consumer"
    assert member["group.remote.assignor"] == "range"
    assert "partition.assignment.strategy" not in member
    assert not any(k.startswith("group.") for k in o.reader_config() if k != "group.id")
    validate_client_config(o)  # librdkafka accepts the member's config as built


def test_subscribe_pattern_becomes_anchored_regex() -> None:
    o = parse_options(with_(subscribe=None, subscribePattern="orders-.*"))
    assert o.subscription == ["^orders-.*"]


def test_starting_offsets_json() -> None:
    o = parse_options(with_(startingOffsets='{"orders": {"0": 23, "1": -2}}'))
    so = o.starting_offsets
    assert so.for_partition(TopicPartition("orders", 0)) == 23
    assert so.for_partition(TopicPartition("orders", 1)) == EARLIEST
    assert so.for_partition(TopicPartition("orders", 2)) == LATEST
    assert parse_options(with_(startingOffsets="EARLIEST")).starting_offsets.default == EARLIEST


@pytest.mark.parametrize(
    ("changes", "option", "words"),
    [
        ({"group.id": None}, "group.id", "required"),
        ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers", "required"),
        ({"subscribe": None}, "subscribe", "neither"),
        ({"subscribePattern": "x.*"}, "subscribe", "both"),
        ({"subscribe": " , "}, "subscribe", "at least one"),
        ({"subscribe": "bad topic!"}, "subscribe", "not a valid"),
        ({"subscribe": None, "subscribePattern": "("}, "subscribePattern", "regular expression"),
        ({"maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger", "greater than 0"),
        ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger", "whole number"),
        ({"includeHeaders": "yes"}, "includeHeaders", "true or false"),
        ({"partition.assignment.strategy": "sticky"}, "partition.assignment.strategy", "unknown"),
        ({"startingOffsets": "{not json"}, "startingOffsets", "JSON"),
        ({"startingOffsets": '{"orders": {"x": 1}}'}, "startingOffsets", "not a number"),
        ({"startingOffsets": '{"orders": {"0": -7}}'}, "startingOffsets", "-2 (earliest)"),
        ({"startingOffsets": "[1]"}, "startingOffsets", "object"),
        ({"endOffsets": "magic"}, "endOffsets", "fetch"),
        (
            {"maxOfsetsPerTrigger": "5"},
            "maxOfsetsPerTrigger",
            "did you mean 'maxOffsetsPerTrigger'",
        ),
        ({"fetch.min.bytes": "5"}, "fetch.min.bytes", "kafka."),
        ({"assign": '{"orders":[0]}'}, "assign", "assigned by the consumer group"),
        ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "not supported"),
        ({"kafka.group.id": "other"}, "group.id", "different values"),
        ({"path": "/x"}, "path", "no path"),
        ({"group.protocol": "next"}, "group.protocol", "classic, consumer"),
        ({"group.remote.assignor": "uniform"}, "group.remote.assignor", "group.protocol=consumer"),
        (
            {"group.protocol": "consumer", "partition.assignment.strategy": "range"},
            "partition.assignment.strategy",
            "group.remote.assignor",
        ),
        (
            {"kafka.group.protocol": "consumer", "kafka.session.timeout.ms": "6000"},
            "kafka.session.timeout.ms",
            "group.consumer.session.timeout.ms",
        ),
        (
            {"group.protocol": "consumer", "kafka.heartbeat.interval.ms": "500"},
            "kafka.heartbeat.interval.ms",
            "group.consumer.heartbeat.interval.ms",
        ),
    ],
)
def test_bad_options_name_the_option(
    changes: dict[str, str | None], option: str, words: str
) -> None:
    opts = dict(BASE)
    for key, value in changes.items():
        if value is None:
            opts.pop(key, None)
        else:
            opts[key] = value
    with pytest.raises(OptionError) as info:
        parse_options(opts)
    assert info.value.option == option
    assert words in str(info.value)
    assert f"option '{option}'" in str(info.value)


def test_librdkafka_rejects_unknown_kafka_setting_by_name() -> None:
    o = parse_options(with_(kafka__no__such__setting="1"))
    with pytest.raises(OptionError) as info:
        validate_client_config(o)
    assert info.value.option == "kafka.no.such.setting"


def test_librdkafka_rejects_malformed_value_by_name() -> None:
    o = parse_options(with_(kafka__session__timeout__ms="soon"))
    with pytest.raises(OptionError) as info:
        validate_client_config(o)
    assert info.value.option == "kafka.session.timeout.ms"


def test_secrets_are_redacted_and_not_in_repr() -> None:
    o = parse_options(with_(kafka__sasl__password="hunter2", kafka__sasl__mechanism="PLAIN"))
    assert "hunter2" not in repr(o)
    shown = redact(o.member_config())
    assert shown["sasl.password"] == "***"
    assert shown["sasl.mechanism"] == "PLAIN"
    assert shown["bootstrap.servers"] == "127.0.0.1:9092"


@pytest.mark.parametrize(
    "key",
    ["sasl.password", "sasl.jaas.config", "sasl.oauthbearer.client.secret", "ssl.key.password",
     "ssl.keystore.password", "ssl.key.pem", "kafka.sasl.username", "sasl.oauthbearer.token"],
)  # fmt: skip
def test_secret_keys(key: str) -> None:
    assert is_secret(key)
    assert scrub(f"bad value s3cr3t for {key}", {key: "s3cr3t"}) == f"bad value *** for {key}"


@pytest.mark.parametrize("key", ["bootstrap.servers", "sasl.mechanism", "security.protocol"])
def test_plain_keys(key: str) -> None:
    assert not is_secret(key)


# ------------------------------------------------------------ more bad inputs (issue 7)


@pytest.mark.parametrize(
    ("changes", "option", "words"),
    [
        # wrong types
        ({"maxOffsetsPerTrigger": "1.5"}, "maxOffsetsPerTrigger", "whole number"),
        ({"brokerTimeoutMs": "30s"}, "brokerTimeoutMs", "whole number"),
        ({"arrowBatchRows": ""}, "arrowBatchRows", "whole number"),
        ({"failOnDataLoss": "1"}, "failOnDataLoss", "true or false"),
        ({"includeHeaders": ""}, "includeHeaders", "true or false"),
        ({"startingOffsets": '{"orders": {"0": "5"}}'}, "startingOffsets", "offset must be"),
        ({"startingOffsets": '{"orders": {"0": true}}'}, "startingOffsets", "offset must be"),
        ({"startingOffsets": '{"orders": {"0": 1.5}}'}, "startingOffsets", "offset must be"),
        ({"startingOffsets": '{"orders": [0, 1]}'}, "startingOffsets", "must map partition"),
        # negative or zero limits
        ({"brokerTimeoutMs": "-1"}, "brokerTimeoutMs", "greater than 0"),
        ({"joinTimeoutMs": "0"}, "joinTimeoutMs", "greater than 0"),
        ({"kafkaConsumer.pollTimeoutMs": "-100"}, "kafkaConsumer.pollTimeoutMs", "greater than 0"),
        ({"arrowBatchRows": "0"}, "arrowBatchRows", "greater than 0"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger", "greater than 0"),
        ({"recordsPerTask": "-1"}, "recordsPerTask", "0 or more"),
        ({"recordsPerTask": "1e5"}, "recordsPerTask", "whole number"),
        ({"recordsPerTask": ""}, "recordsPerTask", "whole number"),
        # conflicting options
        ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribe", "both"),
        ({"kafka.group.id": "etl2"}, "group.id", "different values"),
        (
            {"partition.assignment.strategy": "range", "kafka.partition.assignment.strategy": "x"},
            "partition.assignment.strategy",
            "different values",
        ),
        # unknown names
        ({"partition.assignment.strategy": "sticky-ish"}, "partition.assignment.strategy", "range"),
        ({"deliveryGuarantee": "exactly-once"}, "deliveryGuarantee", "at-least-once"),
        ({"endOffsets": "latest"}, "endOffsets", "listOffsets"),
        ({"readPath": "c"}, "readPath", "auto, python, native"),
        ({"minPartitions": "0"}, "minPartitions", "greater than 0"),
        ({"maxRecordsPerPartition": "-5"}, "maxRecordsPerPartition", "greater than 0"),
        ({"maxRecordsPerPartition": "1e6"}, "maxRecordsPerPartition", "whole number"),
        ({"groupIdPrefix": "x"}, "groupIdPrefix", "not supported"),
        ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        # malformed JSON offsets
        ({"startingOffsets": '{"orders": {"0": 5}'}, "startingOffsets", "JSON"),
        ({"startingOffsets": "'earliest'"}, "startingOffsets", "JSON"),
        ({"startingOffsets": "null"}, "startingOffsets", "object"),
        # blank required values
        ({"group.id": "   "}, "group.id", "required"),
        ({"kafka.bootstrap.servers": " "}, "kafka.bootstrap.servers", "required"),
    ],
)
def test_bad_input_table(changes: dict[str, str | None], option: str, words: str) -> None:
    opts = {**BASE, **changes}
    for key in [k for k, v in opts.items() if v is None]:
        del opts[key]
    with pytest.raises(OptionError) as info:
        parse_options(opts)
    assert info.value.option.lower() == option.lower()
    assert f"option '{info.value.option}'" in str(info.value)
    assert words in str(info.value)


def test_non_string_values_are_parsed_as_their_text() -> None:
    """Python callers may pass ints/bools through .options(**kw); Spark turns them into text."""
    o = parse_options({**BASE, "maxOffsetsPerTrigger": 7, "failOnDataLoss": False})  # type: ignore[dict-item]
    assert o.max_offsets_per_trigger == 7
    assert o.fail_on_data_loss is False
    with pytest.raises(OptionError) as info:
        parse_options({**BASE, "maxOffsetsPerTrigger": -7})  # type: ignore[dict-item]
    assert info.value.option == "maxOffsetsPerTrigger"


SINK_BASE = {"path": "/t", "group.id": "g", "checkpointlocation": "/cp"}


@pytest.mark.parametrize(
    ("changes", "option", "words"),
    [
        ({"checkpointlocation": None}, "checkpointLocation", "required"),
        ({"mergeschema": "yes"}, "mergeSchema", "'true' or 'false'"),
        ({"failongap": "0"}, "failOnGap", "'true' or 'false'"),
        ({"partitionby": "day,day"}, "partitionBy", "twice"),
        ({"compression": "brotli"}, "compression", "snappy"),
        ({"kafka.group.id": "g"}, "group.id", "given twice"),
        ({"subscribe": "orders"}, "subscribe", "unknown option"),
        ({"storage.": "x"}, "storage.", "unknown option"),
    ],
)
def test_bad_sink_input_table(changes: dict[str, str | None], option: str, words: str) -> None:
    from spark_groups.options.sink import parse_sink_options

    opts = {**SINK_BASE, **changes}
    for key in [k for k, v in opts.items() if v is None]:
        del opts[key]
    with pytest.raises(OptionError) as info:
        parse_sink_options(opts)
    assert info.value.option == option
    assert f"option '{option}'" in str(info.value)
    assert words in str(info.value)


def test_sink_path_and_group_are_optional_at_parse_time_the_source_gives_them() -> None:
    """Said once: without path and group.id the sink takes both from the batch's source
    (tests/unit/test_pipeline.py checks where neither side gives them)."""
    from spark_groups.options.sink import parse_sink_options

    parsed = parse_sink_options({"path": " ", "group.id": "", "checkpointlocation": "/cp"})
    assert parsed.path is None and parsed.group_id is None


def test_offsets_table_that_is_no_ledger_names_the_option(tmp_path) -> None:
    """offsets.table pointing at a non-Delta directory, another Delta table, or another
    group's ledger: a LedgerError that names the option and the path."""
    from datetime import UTC, datetime

    import pyarrow as pa
    from deltalake import write_deltalake

    from spark_groups.errors import LedgerError
    from spark_groups.ledger import LedgerRow, OffsetLedger

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "data.csv").write_text("a,b\n")
    other_table = tmp_path / "other"
    write_deltalake(str(other_table), pa.table({"id": [1]}))
    theirs = tmp_path / "theirs"
    OffsetLedger(str(theirs), "their-group").append(
        [
            LedgerRow(
                topic="t",
                partition=0,
                from_offset=0,
                until_offset=1,
                member_id="m",
                generation=1,
                batch=0,
                committed_at=datetime.now(UTC),
            )
        ]
    )
    for path, words in (
        (plain, "not a Delta table"),
        (other_table, "another schema"),
        (theirs, "belongs to consumer group 'their-group'"),
    ):
        with pytest.raises(LedgerError) as info:
            OffsetLedger(str(path), "etl").latest_positions()
        assert info.value.option == "offsets.table"
        assert "offsets.table" in str(info.value)
        assert str(path) in str(info.value)
        assert words in str(info.value)
