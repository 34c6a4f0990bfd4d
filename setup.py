"""The optional C accelerator of the executor read path (``spark_groups.read._native``).

Everything else is in ``pyproject.toml``. ``optional=True``: without a C compiler or Python's
headers the install still succeeds, without the extension, and the pure-Python read path runs.
librdkafka is not linked: the extension loads confluent-kafka's own at run time.
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "spark_groups.read._native",
            ["spark_groups/read/_native.c"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        )
    ]
)
