"""Protobuf schemas from the registry as descriptors, each schema in a pool of its own.

A registry holds a Protobuf schema in one of two forms: a base64 ``FileDescriptorProto``
(what Confluent's registry answers with ``format=serialized``, and what confluent-kafka's
``ProtobufSerializer`` registers) or ``.proto`` text (what Java's serializer registers, and
what registries without that format answer). The first is read as it is; the second is
compiled by ``protoc`` from grpcio-tools (``pip install 'spark-groups[protobuf]'``). A schema's
references are its imports by name; the well-known types (``google/protobuf/*.proto``) come
with protobuf. Two versions of one schema define the same message names, so each schema id
gets its own ``DescriptorPool``.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The well-known types' modules, whose files a schema may import without a reference.
_WELL_KNOWN = (
    "any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp",
    "type", "wrappers",
)  # fmt: skip
#: How long protoc may take to compile one schema.
_PROTOC_TIMEOUT_S = 60


class ProtobufSchemaError(ValueError):
    """The schema is not valid Protobuf, names no such message, or cannot be compiled here."""


@dataclass(frozen=True)
class ProtobufSchema:
    """One registry schema as descriptors: ``file`` (its ``FileDescriptor``) in a pool of its
    own, and its file's top-level message names in declaration order."""

    file: Any
    messages: tuple[str, ...]

    def message(self, name: str | None) -> Any:
        """The message named ``name`` (fully qualified, or relative to the file's package),
        or the file's first message when ``name`` is None."""
        if name is None:
            if not self.messages:
                raise ProtobufSchemaError(f"{self.file.name} defines no message")
            return self.file.message_types_by_name[self.messages[0]]
        pool = self.file.pool
        package = self.file.package
        for candidate in (name, f"{package}.{name}" if package else name):
            try:
                return pool.FindMessageTypeByName(candidate)
            except KeyError:
                continue
        raise ProtobufSchemaError(
            f"the schema defines no message {name!r} (it defines "
            f"{', '.join(self.messages) or 'none'} at the top level)"
        )

    def by_indexes(self, indexes: tuple[int, ...]) -> Any:
        """The message a record's Confluent message indexes name (the first index into the
        file's top-level messages, each next one into the previous one's nested messages)."""
        messages = [self.file.message_types_by_name[n] for n in self.messages]
        found = None
        for depth, index in enumerate(indexes):
            if not 0 <= index < len(messages):
                raise ProtobufSchemaError(
                    f"message index {list(indexes)} names no message of {self.file.name} (at "
                    f"depth {depth}, {len(messages)} message(s))"
                )
            found = messages[index]
            messages = list(found.nested_types)
        if found is None:
            raise ProtobufSchemaError("an empty message index names no message")
        return found


def load(schema_id: int, text: str, references: tuple[tuple[str, str], ...]) -> ProtobufSchema:
    """The schema ``text`` (and its references, import name -> text, each either form) as a
    :class:`ProtobufSchema`; :class:`ProtobufSchemaError` when it is not valid Protobuf."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    name = f"schema-{schema_id}.proto"
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    texts: dict[str, str] = {}
    for file_name, content in (*references, (name, text)):
        parsed = _serialized(file_name, content)
        if parsed is None:
            texts[file_name] = content
        else:
            files[file_name] = parsed
    if texts:
        files.update(_compiled(texts, files))
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file_name: str, path: tuple[str, ...]) -> None:
        if file_name in added:
            return
        proto = files[file_name] if file_name in files else _well_known(file_name)
        if proto is None:
            raise ProtobufSchemaError(
                f"{path[-1] if path else name} imports {file_name!r}, which is neither among "
                "the schema's references nor a well-known type"
            )
        if file_name in path:
            raise ProtobufSchemaError(f"the imports of {file_name!r} form a cycle")
        for dependency in proto.dependency:
            add(dependency, (*path, file_name))
        try:
            pool.AddSerializedFile(proto.SerializeToString())
        except (TypeError, ValueError) as exc:
            raise ProtobufSchemaError(f"{file_name}: {exc}") from None
        added.add(file_name)

    add(name, ())
    file = pool.FindFileByName(name)
    return ProtobufSchema(file, tuple(m.name for m in files[name].message_type))


def _serialized(name: str, content: str) -> Any:
    """``content`` as a ``FileDescriptorProto`` named ``name`` when it is the base64 form,
    else None (then it is ``.proto`` text)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        raw = base64.b64decode(content.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(raw)
    except DecodeError:
        return None
    proto.name = name
    return proto


def _well_known(name: str) -> Any:
    """The ``FileDescriptorProto`` of a well-known type's file, or None."""
    from google.protobuf import descriptor_pb2

    stem = name.removeprefix("google/protobuf/").removesuffix(".proto")
    if not name.startswith("google/protobuf/") or stem not in _WELL_KNOWN:
        return None
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _compiled(texts: dict[str, str], parsed: dict[str, Any]) -> dict[str, Any]:
    """The ``.proto`` files ``texts`` (name -> text) compiled by grpcio-tools' protoc, beside
    the files already ``parsed``: name -> ``FileDescriptorProto``."""
    from google.protobuf import descriptor_pb2

    try:
        grpc_tools = importlib.import_module("grpc_tools")
    except ImportError:
        raise ProtobufSchemaError(
            "the registry holds this schema as .proto text, which needs protoc to compile: "
            "pip install 'spark-groups[protobuf]' (grpcio-tools), or have the registry answer "
            "format=serialized (Confluent Schema Registry does)"
        ) from None
    include = Path(str(grpc_tools.__file__)).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="spark-groups-proto-") as tmp:
        root = Path(tmp)
        for file_name, text in texts.items():
            path = root / "src" / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        command = [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{root / 'src'}", f"-I{include}",
            "--include_imports", f"--descriptor_set_out={root / 'out.pb'}",
        ]  # fmt: skip
        if parsed:
            given = descriptor_pb2.FileDescriptorSet(file=list(parsed.values()))
            (root / "in.pb").write_bytes(given.SerializeToString())
            command.append(f"--descriptor_set_in={root / 'in.pb'}")
        done = subprocess.run(
            [*command, *texts], capture_output=True, text=True, timeout=_PROTOC_TIMEOUT_S
        )
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().replace(str(root / "src") + "/", "")
            raise ProtobufSchemaError(f"protoc cannot compile it: {detail[:400]}")
        out = descriptor_pb2.FileDescriptorSet()
        out.ParseFromString((root / "out.pb").read_bytes())
    return {f.name: f for f in out.file if f.name in texts}
