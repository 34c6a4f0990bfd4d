"""Spark's settings for the fetched jar sets, and the error when one is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_groups.errors import SparkGroupsError
from spark_groups.tools.spark_jars import JarsMissingError, jar_conf, spark_jars


def test_spark_jars_lists_the_fetched_files_as_a_comma_list(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPARK_GROUPS_JARS", str(tmp_path))
    folder = tmp_path / "spark-kafka"
    folder.mkdir()
    for name in ("b.jar", "a.jar", ".stamp"):
        (folder / name).write_text("x")
    assert spark_jars("spark-kafka") == f"{folder}/a.jar,{folder}/b.jar"
    assert jar_conf("spark-kafka") == {"spark.jars": f"{folder}/a.jar,{folder}/b.jar"}


def test_a_missing_jar_set_says_how_to_fetch_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPARK_GROUPS_JARS", str(tmp_path))
    with pytest.raises(JarsMissingError) as caught:
        spark_jars("delta-spark")
    assert isinstance(caught.value, SparkGroupsError)
    assert caught.value.command == "bash jars/fetch delta-spark"
    assert "bash jars/fetch delta-spark" in str(caught.value)
    with pytest.raises(ValueError, match="unknown jar set"):
        spark_jars("kafka")  # the broker's jars are not for Spark
