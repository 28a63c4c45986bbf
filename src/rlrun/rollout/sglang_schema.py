"""SGLang's ServerArgs and request dataclasses, read from the pinned sglang source with `ast`.

SGLang itself cannot be imported here (it pins torch==2.9.1), so the facts rlrun needs from it are
extracted from the wheel's source text and committed as JSON next to this file:
  sglang_server_args.json  every ServerArgs field: type, default, CLI flag and argparse action
  sglang_io_struct.json    the request dataclasses of the HTTP endpoints rlrun calls
Regenerate after bumping the pin:
    pip download sglang==0.5.10.post1 --no-deps -d /tmp/w
    python -m rlrun.rollout.sglang_schema /tmp/w/sglang-0.5.10.post1-py3-none-any.whl
tests/unit/test_rollout_sglang_schema.py re-extracts from the wheel (when present) and compares.
"""
from __future__ import annotations

import ast
import json
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

SGLANG_VERSION = "0.5.10.post1"
HERE = Path(__file__).parent
SERVER_ARGS_JSON = HERE / "sglang_server_args.json"
IO_STRUCT_JSON = HERE / "sglang_io_struct.json"
SERVER_ARGS_SRC = "sglang/srt/server_args.py"
IO_STRUCT_SRC = "sglang/srt/managers/io_struct.py"
# The request classes whose bodies rlrun builds (see rlrun.rollout.api.BODY_BUILDERS) + /generate.
IO_CLASSES = (
    "GenerateReqInput", "UpdateWeightFromDiskReqInput", "UpdateWeightsFromTensorReqInput",
    "InitWeightsUpdateGroupReqInput", "UpdateWeightsFromDistributedReqInput",
    "DestroyWeightsUpdateGroupReqInput", "ReleaseMemoryOccupationReqInput",
    "ResumeMemoryOccupationReqInput", "PauseGenerationReqInput", "ContinueGenerationReqInput",
    "AbortReq", "UpdateWeightVersionReqInput", "FlushCacheReqInput",
)


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"class {name} not found in the sglang source; did the pin change?")


def _own_fields(cls: ast.ClassDef) -> dict[str, dict]:
    out = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out[stmt.target.id] = {
                "type": ast.unparse(stmt.annotation),
                "default": None if stmt.value is None else ast.unparse(stmt.value),
                "required": stmt.value is None,
            }
    return out


def _argparse_calls(cls: ast.ClassDef) -> dict[str, dict]:
    """field name -> CLI facts, from `parser.add_argument(...)` inside ServerArgs.add_cli_args."""
    out = {}
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else flags[0].lstrip("-").replace("-", "_")
        action = ast.unparse(kw["action"]).strip("'\"") if "action" in kw else "value"
        choices = None
        if "choices" in kw:
            try:
                choices = ast.literal_eval(kw["choices"])
            except ValueError:  # computed choices (e.g. a list built elsewhere): keep the expression
                choices = ast.unparse(kw["choices"])
        facts = {
            "flag": flags[0], "aliases": flags[1:], "action": action,
            "nargs": kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else None,
            "choices": choices,
        }
        out.setdefault(dest, facts)
        # `--tensor-parallel-size --tp-size` has dest tensor_parallel_size, and ServerArgs copies it
        # into tp_size: index every spelling so that each field finds the flag that sets it.
        for flag in flags:
            out.setdefault(flag.lstrip("-").replace("-", "_"), {**facts, "flag": flag,
                                                                 "aliases": [f for f in flags if f != flag]})
    return out


def extract_server_args(source: str) -> dict:
    cls = _class(ast.parse(source), "ServerArgs")
    fields = _own_fields(cls)
    cli = _argparse_calls(cls)
    for name, facts in fields.items():
        facts["cli"] = cli.get(name)  # None: internal field, not settable from the command line
    return {"sglang_version": SGLANG_VERSION, "source": SERVER_ARGS_SRC, "fields": fields}


def extract_io_struct(source: str) -> dict:
    tree = ast.parse(source)
    classes = {}
    for name in IO_CLASSES:
        cls = _class(tree, name)
        fields: dict[str, dict] = {}
        for base in cls.bases:  # BaseReq contributes rid (kw_only)
            base_name = ast.unparse(base)
            if base_name in ("BaseReq", "BaseBatchReq"):
                fields.update(_own_fields(_class(tree, base_name)))
        fields.update(_own_fields(cls))
        classes[name] = {"fields": fields}
    return {"sglang_version": SGLANG_VERSION, "source": IO_STRUCT_SRC, "classes": classes}


def extract_from_wheel(wheel: str | Path) -> tuple[dict, dict]:
    with zipfile.ZipFile(wheel) as zf:
        server_args = extract_server_args(zf.read(SERVER_ARGS_SRC).decode())
        io_struct = extract_io_struct(zf.read(IO_STRUCT_SRC).decode())
    return server_args, io_struct


@lru_cache(maxsize=1)
def server_args_schema() -> dict:
    return json.loads(SERVER_ARGS_JSON.read_text())


@lru_cache(maxsize=1)
def io_struct_schema() -> dict:
    return json.loads(IO_STRUCT_JSON.read_text())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit(f"usage: python -m rlrun.rollout.sglang_schema sglang-{SGLANG_VERSION}-py3-none-any.whl")
    server_args, io_struct = extract_from_wheel(argv[0])
    SERVER_ARGS_JSON.write_text(json.dumps(server_args, indent=1, sort_keys=True) + "\n")
    IO_STRUCT_JSON.write_text(json.dumps(io_struct, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SERVER_ARGS_JSON} ({len(server_args['fields'])} fields) and {IO_STRUCT_JSON}")


if __name__ == "__main__":
    main()
