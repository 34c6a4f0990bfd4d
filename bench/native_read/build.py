"""Build the prototype in place: ``python3 bench/native_read/build.py`` (needs a C compiler
and Python's headers; no librdkafka or Arrow packages: librdkafka is confluent-kafka's own,
loaded at run time, and Arrow is reached through its C data interface)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    source = os.path.join(HERE, "_native.c")
    target = os.path.join(HERE, "_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    cc = os.environ.get("CC", "cc")
    command = [
        cc,
        "-O2",
        "-shared",
        "-fPIC",
        "-Wall",
        "-I" + sysconfig.get_paths()["include"],
        source,
        "-o",
        target,
        "-ldl",
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    print(f"built {os.path.relpath(target)} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
