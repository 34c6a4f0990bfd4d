"""The optional C accelerator of the executor read path (``spark_groups.read._native``).

Everything else is in ``pyproject.toml``. ``optional=True``: without a C compiler or Python's
headers the install still succeeds, without the extension, and the pure-Python read path runs
(``spark-groups --version`` says which path a machine has). The extension is built against
Python's limited API of 3.11, so one ``abi3`` wheel serves CPython 3.11 and later. librdkafka
is not linked: the extension loads confluent-kafka's own at run time (it links libc and libdl
only; ``auditwheel show`` on the wheel says so).
"""

import sys

from setuptools import Extension, setup

LIMITED_API = "cp311"  # the oldest CPython the wheel loads on (requires-python)

setup(
    ext_modules=[
        Extension(
            "spark_groups.read._native",
            ["spark_groups/read/_native.c"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        ),
        # The C Avro decoder of value.format=avro-confluent (formats/avro_program.py compiles
        # its programs); without it fastavro decodes, with the same values.
        Extension(
            "spark_groups.formats._avro",
            ["spark_groups/formats/_avro.c"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        ),
    ],
    options={"bdist_wheel": {"py_limited_api": LIMITED_API}},
)
