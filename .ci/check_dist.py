"""Checks a release build (``.ci/build``): what the sdist and the wheel carry and how the wheel's
extension links. Usage: python .ci/check_dist.py DIST_DIR (run where auditwheel is installed:
it brings pyelftools)."""

from __future__ import annotations

import io
import sys
import tarfile
import zipfile
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# What the C extension may link: the C library (and, before glibc 2.34, the loader's own
# library); librdkafka is dlopen()ed from confluent-kafka's wheel at run time.
ALLOWED_NEEDED = {"libc.so.6", "libdl.so.2"}
#: The C extensions the wheel carries, built (the native reader, the Avro decoder).
EXTENSIONS = ("spark_groups/read/_native", "spark_groups/formats/_avro")


def needed(elf_bytes: bytes) -> set[str]:
    """The DT_NEEDED entries of a shared object."""
    elf = ELFFile(io.BytesIO(elf_bytes))
    return {
        tag.needed
        for section in elf.iter_sections()
        if isinstance(section, DynamicSection)
        for tag in section.iter_tags()
        if tag.entry.d_tag == "DT_NEEDED"
    }


def check_wheel(path: Path) -> list[str]:
    """What is wrong with the wheel (an empty list when nothing)."""
    problems = []
    tags = path.stem.split("-")[-3:]
    if tags[:2] != ["cp311", "abi3"] or not tags[2].startswith("manylinux"):
        problems.append(f"{path.name}: expected a cp311-abi3-manylinux wheel, tags {tags}")
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        for module in EXTENSIONS:
            extensions = [n for n in names if n.startswith(module)]
            if extensions != [f"{module}.abi3.so"]:
                problems.append(f"{path.name}: {extensions}, expected {module}.abi3.so")
                continue
            links = needed(wheel.read(extensions[0]))
            if not links <= ALLOWED_NEEDED:
                problems.append(f"{extensions[0]} links {sorted(links - ALLOWED_NEEDED)}")
        for required in ("spark_groups/py.typed", "spark_groups/__init__.py"):
            if required not in names:
                problems.append(f"{path.name} lacks {required}")
        if any(n.endswith(".c") for n in names):
            problems.append(f"{path.name} carries C sources")
    return problems


def check_sdist(path: Path) -> list[str]:
    """What is wrong with the sdist (an empty list when nothing)."""
    with tarfile.open(path) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    required = {"LICENSE", "CHANGELOG.md", "setup.py", *(f"{m}.c" for m in EXTENSIONS)}
    return [f"{path.name} lacks {name}" for name in sorted(required - names)]


def main(dist: Path) -> int:
    """Check the one wheel and the one sdist in ``dist``; 0 when both are right."""
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}: {wheels + sdists}", file=sys.stderr)
        return 1
    problems = check_wheel(wheels[0]) + check_sdist(sdists[0])
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{wheels[0].name}, {sdists[0].name}: as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
