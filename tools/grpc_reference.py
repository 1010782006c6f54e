"""Write docs/reference/grpc-api.md from protos/*.proto (services, methods, messages, comments).

protoc (grpcio-tools, the pinned dev dependency that also generates the stubs) parses the files
with their comments into descriptors; this script only lays them out. Run it after changing a
.proto: ``python tools/grpc_reference.py``; tests/docs/test_docs_reference.py fails when the committed
page differs from what it writes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PAGE = ROOT / "docs" / "reference" / "grpc-api.md"

# FieldDescriptorProto.Type -> the name written in a .proto file
SCALARS = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}
# paths into FileDescriptorProto (descriptor.proto's field numbers)
MESSAGE, SERVICE, ENUM = 4, 6, 5
FIELD, METHOD, VALUE, NESTED = 2, 2, 2, 3


def descriptors() -> descriptor_pb2.FileDescriptorSet:
    """Every .proto in protos/, parsed by protoc with its source comments."""
    files = sorted(p.name for p in PROTOS.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        status = protoc.main(
            ["protoc", f"-I{PROTOS}", "--include_source_info", f"--descriptor_set_out={out}", *files]
        )
        if status != 0:
            raise RuntimeError(f"protoc failed on {files} (status {status})")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def comments(proto: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    """Leading and trailing comments by descriptor path, joined into one line of prose."""
    found = {}
    for location in proto.source_code_info.location:
        text = " ".join((location.leading_comments + " " + location.trailing_comments).split())
        if text:
            found[tuple(location.path)] = text
    return found


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def type_name(field: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    name = SCALARS.get(field.type) or field.type_name.removeprefix(f".{package}.").lstrip(".")
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {name}"
    return name


def message_section(
    message: descriptor_pb2.DescriptorProto,
    path: tuple[int, ...],
    notes: dict[tuple[int, ...], str],
    package: str,
    prefix: str = "",
) -> list[str]:
    name = prefix + message.name
    lines = [f"### {name}", ""]
    if path in notes:
        lines += [notes[path], ""]
    if message.field:
        lines += ["| field | number | type | meaning |", "|---|---|---|---|"]
        for i, field in enumerate(message.field):
            meaning = notes.get((*path, FIELD, i), "")
            kind = type_name(field, package)
            if field.HasField("oneof_index"):
                meaning = f"(one of `{message.oneof_decl[field.oneof_index].name}`) {meaning}".strip()
            lines.append(f"| `{field.name}` | {field.number} | `{kind}` | {cell(meaning)} |")
    else:
        lines.append("No fields.")
    lines.append("")
    for j, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:
            lines += message_section(nested, (*path, NESTED, j), notes, package, f"{name}.")
    return lines


def file_section(proto: descriptor_pb2.FileDescriptorProto) -> list[str]:
    notes = comments(proto)
    lines = [f"## {proto.name} (package `{proto.package}`)", ""]
    header = " ".join(
        text
        for path, text in notes.items()
        if path in ((12,), (2,))  # syntax, package comments
    )
    if header:
        lines += [header, ""]
    for s, service in enumerate(proto.service):
        lines += [f"### service {service.name}", ""]
        if (SERVICE, s) in notes:
            lines += [notes[(SERVICE, s)], ""]
        lines += ["| method | request | response | what it does |", "|---|---|---|---|"]
        for m, method in enumerate(service.method):
            request = ("stream " if method.client_streaming else "") + method.input_type.split(".")[-1]
            response = ("stream " if method.server_streaming else "") + method.output_type.split(".")[-1]
            meaning = notes.get((SERVICE, s, METHOD, m), "")
            lines.append(f"| `{method.name}` | `{request}` | `{response}` | {cell(meaning)} |")
        lines.append("")
    for e, enum in enumerate(proto.enum_type):
        lines += [f"### enum {enum.name}", ""]
        if (ENUM, e) in notes:
            lines += [notes[(ENUM, e)], ""]
        lines += ["| value | number | meaning |", "|---|---|---|"]
        for v, value in enumerate(enum.value):
            lines.append(f"| `{value.name}` | {value.number} | {cell(notes.get((ENUM, e, VALUE, v), ''))} |")
        lines.append("")
    for i, message in enumerate(proto.message_type):
        lines += message_section(message, (MESSAGE, i), notes, proto.package)
    return lines


def render() -> str:
    lines = [
        "# gRPC API",
        "",
        "Generated from `protos/*.proto` by `tools/grpc_reference.py`; do not edit by hand. Every",
        "server also answers gRPC reflection and the standard health service",
        "(`grpc.health.v1.Health`). Message sizes are bounded on both ends (`protos/message_limits.py`).",
        "",
    ]
    for proto in descriptors().file:
        lines += file_section(proto)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
