"""What a support case needs first: the versions spark_groups runs with (``--version``)."""

from __future__ import annotations

import platform
from importlib import metadata

import spark_groups


def _installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> list[tuple[str, str]]:
    """(name, version) of spark_groups and of what it runs with: pyspark, confluent-kafka and
    the librdkafka it loaded, deltalake, Python, and the executor read path this machine
    would take (``spark_groups.read.native``), and the Avro decoder (``formats.avro_native``)."""
    from spark_groups.formats import avro_native
    from spark_groups.kafka.client import librdkafka_version
    from spark_groups.read import native

    client, librdkafka = librdkafka_version()
    reason = native.load_error()
    return [
        ("spark-groups", spark_groups.__version__),
        ("pyspark", _installed("pyspark")),
        ("delta-spark", _installed("delta-spark")),
        ("confluent-kafka", client),
        ("librdkafka", librdkafka),
        ("deltalake", _installed("deltalake")),
        ("pyarrow", _installed("pyarrow")),
        ("python", platform.python_version()),
        ("read path", "native" if not reason else f"python ({reason})"),
        (
            "avro decoder",
            "c"
            if avro_native._avro is not None
            else "fastavro (the C extension spark_groups.formats._avro is not built)",
        ),
    ]


def versions_text() -> str:
    """:func:`versions` as aligned lines."""
    rows = versions()
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
