"""docs/options.md's table of every Spark kafka source option, checked against the code: a row
marked supported or different is accepted by parse_options, a row marked refused or not yet
fails with an OptionError naming the option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_groups.errors import OptionError
from spark_groups.options import parse_options

DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "group.id": "etl"}
#: A valid value for each accepted option (the default for anything not listed: "1").
VALUES = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "orders,payments",
    "subscribePattern": "orders.*",
    "kafka.group.id": "etl",
    "startingOffsets": "earliest",
    "failOnDataLoss": "false",
    "includeHeaders": "true",
    "startingOffsetsByTimestamp": '{"orders": {"0": 1700000000000}}',
    "startingOffsetsByTimestampStrategy": "latest",
    "maxTriggerDelay": "30s",
}
#: The options each accepted one replaces in BASE (only one of subscribe/subscribePattern).
REPLACES = {"subscribePattern": "subscribe", "kafka.group.id": "group.id"}


def spark_option_rows() -> list[tuple[str, str]]:
    """(option, status) of each row of the "Every option of Spark's kafka source" table."""
    section = DOC.read_text().split("## Every option of Spark's `kafka` source")[1]
    section = section.split("\n## ")[0]
    rows = re.findall(r"^\| `([^`]+)`[^|]* \| ([a-z ]+) \|", section, re.MULTILINE)
    assert len(rows) > 20, "the table of Spark's options is missing from docs/options.md"
    return [(name, status.strip()) for name, status in rows if "*" not in name]


ROWS = spark_option_rows()


def test_every_row_has_a_known_status() -> None:
    assert {status for _, status in ROWS} <= {"supported", "different", "refused", "not yet"}
    names = [name for name, _ in ROWS]
    assert len(names) == len(set(names)), "an option is listed twice"


@pytest.mark.parametrize("name", [n for n, s in ROWS if s in ("supported", "different")], ids=str)
def test_supported_options_are_accepted(name: str) -> None:
    options = {k: v for k, v in BASE.items() if k != REPLACES.get(name)}
    options[name] = VALUES.get(name, "1")
    parse_options(options)


@pytest.mark.parametrize("name", [n for n, s in ROWS if s in ("refused", "not yet")], ids=str)
def test_refused_and_missing_options_fail_naming_the_option(name: str) -> None:
    status = dict(ROWS)[name]
    with pytest.raises(OptionError) as raised:
        parse_options({**BASE, name: "1"})
    assert raised.value.option == name
    if status == "refused":
        assert "not supported" in raised.value.problem
    else:
        assert "unknown option" in raised.value.problem
