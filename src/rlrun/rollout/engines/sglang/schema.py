"""SGLang's ServerArgs and request dataclasses, read from the pinned sglang source with `ast`.

SGLang needs CUDA and pins torch==2.11.0 (the CPU machine has 2.13), so it is never imported here: the
facts rlrun needs from it are extracted from the wheel's source text and committed as JSON next to this file:
  server_args.json  every ServerArgs field: type, default, CLI flag and argparse action
  io_struct.json    the request dataclasses of the HTTP endpoints rlrun calls
Regenerate after bumping the pin:
    pip download sglang==0.5.16 --no-deps -d /tmp/w
    python -m rlrun.rollout.engines.sglang.schema /tmp/w/sglang-0.5.16-*.whl
Since 0.5.13 most ServerArgs fields declare their flag in the annotation, `A[type, "help"]` or
`A[type, Arg(choices=..., aliases=..., action=..., no_cli=True)]` (sglang/srt/arg_groups/arg_utils.py,
`add_cli_args_from_dataclass`); the rest still call `parser.add_argument` in `add_cli_args`. Both are read; a flag's
`choices=NAME` is resolved from the module's constants (Constants), and marked extensible where SGLang plugins
extend that list.
tests/unit/test_rollout_sglang_schema.py re-extracts from the wheel (when present) and compares.
"""
from __future__ import annotations

import ast
import json
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

SGLANG_VERSION = "0.5.16"
HERE = Path(__file__).parent
SERVER_ARGS_JSON = HERE / "server_args.json"
IO_STRUCT_JSON = HERE / "io_struct.json"
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


def _annotated(annotation: ast.expr) -> tuple[ast.expr, ast.expr | None]:
    """`A[T, meta]` / `Annotated[T, meta]` -> (T, meta); any other annotation -> (it, None)."""
    if (isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name)
            and annotation.value.id in ("A", "Annotated") and isinstance(annotation.slice, ast.Tuple)):
        inner, *meta = annotation.slice.elts
        return inner, (meta[0] if meta else None)
    return annotation, None


def _default(value: ast.expr | None) -> str | None:
    """The default's source; `field(default=X, ...)` -> X (dataclass fields written either way)."""
    if value is None:
        return None
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        for k in value.keywords:
            if k.arg == "default":
                return ast.unparse(k.value)
    return ast.unparse(value)


def _own_fields(cls: ast.ClassDef) -> dict[str, dict]:
    out = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            inner, _ = _annotated(stmt.annotation)
            out[stmt.target.id] = {
                "type": ast.unparse(inner),
                "default": _default(stmt.value),
                "required": stmt.value is None,
            }
    return out


def _unwrap(node: ast.expr, name: str) -> ast.expr | None:
    """`name[X]` -> X (e.g. Optional[int] -> int), else None."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in (name, f"typing.{name}"):
        return node.slice
    return None


def _literal(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except ValueError:  # computed (a list built elsewhere in the module): keep the expression
        return ast.unparse(node)


class Constants:
    """server_args.py's module-level lists (`ATTENTION_BACKEND_CHOICES = [...]`, `A = B + [...]`), so that a flag's
    `choices=NAME` becomes the list it names; `extensible`: the lists a module function extends
    (`add_attention_backend_choices`: SGLang plugins register more values at import)."""

    def __init__(self, tree: ast.Module | None = None):
        self.values: dict[str, list] = {}
        self.extensible: set[str] = set()
        for node in tree.body if tree is not None else []:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    self.values[node.targets[0].id] = self._resolve(node.value)
                except ValueError:
                    pass
            elif isinstance(node, ast.FunctionDef):
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr in ("extend", "append", "insert")
                            and isinstance(call.func.value, ast.Name)):
                        self.extensible.add(call.func.value.id)

    def _resolve(self, node: ast.expr) -> list:
        """A list of constants, by name, literal or `+` of those; ValueError for anything else."""
        if isinstance(node, ast.Name) and node.id in self.values:
            return list(self.values[node.id])
        if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in node.elts):
            return [e.value for e in node.elts]
        if isinstance(node, ast.Set) and all(isinstance(e, ast.Constant) for e in node.elts):
            return sorted({e.value for e in node.elts}, key=str)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._resolve(node.left) + self._resolve(node.right)
        raise ValueError(ast.unparse(node))

    def choices(self, node: ast.expr) -> tuple[list | str, bool]:
        """(the choices as a list, or the expression's source when it cannot be resolved; whether plugins extend
        them)."""
        try:
            values = self._resolve(node)
        except ValueError:
            return _literal(node), False
        return values, any(isinstance(n, ast.Name) and n.id in self.extensible for n in ast.walk(node))


def _with_choices(facts: dict, kw: dict, consts: Constants) -> dict:
    facts["choices"], extensible = consts.choices(kw["choices"]) if "choices" in kw else (None, False)
    if extensible:
        facts["choices_extensible"] = True
    return facts


def _annotation_cli(name: str, annotation: ast.expr, consts: Constants) -> dict | None | bool:
    """CLI facts of an `A[T, "help"]` / `A[T, Arg(...)]` field, as add_cli_args_from_dataclass
    derives them; None: no_cli; False: not an annotated field (its flag, if any, is added by hand)."""
    inner, meta = _annotated(annotation)
    if meta is None:
        return False
    kw: dict[str, ast.expr] = {}
    if isinstance(meta, ast.Call) and ast.unparse(meta.func) == "Arg":
        kw = {k.arg: k.value for k in meta.keywords if k.arg}
    elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
        return False
    if "no_cli" in kw and _literal(kw["no_cli"]) is True:
        return None
    flag = _literal(kw["cli_name"]) if "cli_name" in kw else "--" + name.replace("_", "-")
    facts = _with_choices({"flag": flag, "aliases": list(_literal(kw["aliases"])) if "aliases" in kw else [],
                           "action": "value", "nargs": _literal(kw["nargs"]) if "nargs" in kw else None}, kw, consts)
    base = _unwrap(inner, "Optional") or inner
    if "action" in kw:
        facts["action"] = ast.unparse(kw["action"]).strip("'\"")
    elif (lit := _unwrap(base, "Literal")) is not None:
        if not isinstance(facts["choices"], list):  # the Literal's values beat an unresolved expression
            facts["choices"] = list(_literal(lit)) if isinstance(lit, ast.Tuple) else [_literal(lit)]
    elif _unwrap(base, "List") is not None or _unwrap(base, "list") is not None:
        if "type_parser" not in kw:
            facts["nargs"] = facts["nargs"] or "+"
    elif ast.unparse(base) == "bool":
        facts["action"] = "store_true"
    return facts


def _argparse_calls(cls: ast.ClassDef, consts: Constants) -> dict[str, dict]:
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
        facts = _with_choices({
            "flag": flags[0], "aliases": flags[1:], "action": action, "dest": dest,
            "nargs": kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else None,
        }, kw, consts)
        out.setdefault(dest, facts)
        # `--tensor-parallel-size --tp-size` has dest tensor_parallel_size, and ServerArgs copies it
        # into tp_size: index every spelling so that each field finds the flag that sets it.
        for flag in flags:
            out.setdefault(flag.lstrip("-").replace("-", "_"), {**facts, "flag": flag,
                                                                 "aliases": [f for f in flags if f != flag]})
    return out


def _switch_or_value(facts: dict) -> dict:
    """A hand-added flag's facts without its dest; SGLang's Deprecated*Action flags (still accepted,
    with a warning) become what they are on the command line: a switch (StoreTrue, StoreConst:
    no value) or a flag with a value."""
    out = {k: v for k, v in facts.items() if k != "dest"}
    if out["action"].startswith("Deprecated"):
        switch = any(kind in out["action"] for kind in ("StoreTrue", "StoreConst"))
        out.update(deprecated=out["action"], action="store_true" if switch else "value")
    return out


def extract_server_args(source: str) -> dict:
    tree = ast.parse(source)
    cls, consts = _class(tree, "ServerArgs"), Constants(tree)
    fields = _own_fields(cls)
    cli = _argparse_calls(cls, consts)
    annotations = {s.target.id: s.annotation for s in cls.body
                   if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    for name, facts in fields.items():
        declared = _annotation_cli(name, annotations[name], consts)
        # the annotation's own flag first; fields declared no_cli or not annotated may still have a
        # hand-written add_argument (deprecated spellings: DeprecatedStoreTrueAction and friends);
        # None: internal field, not settable from the command line
        facts["cli"] = declared or (_switch_or_value(cli[name]) if name in cli else None)
    # old spellings SGLang still accepts for a field under another name (e.g. --cuda-graph-max-bs, whose
    # dest became cuda_graph_max_bs_decode in 0.5.13): slime scripts and older configs use them
    renamed = {spelling: {"field": facts["dest"], **_switch_or_value(facts)} for spelling, facts in cli.items()
               if spelling not in fields and facts["dest"] in fields and facts["dest"] != spelling}
    return {"sglang_version": SGLANG_VERSION, "source": SERVER_ARGS_SRC, "fields": fields,
            "renamed": dict(sorted(renamed.items()))}


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
    # as the committed JSON holds them (literal tuples become lists)
    return json.loads(json.dumps(server_args)), json.loads(json.dumps(io_struct))


@lru_cache(maxsize=1)
def server_args_schema() -> dict:
    return json.loads(SERVER_ARGS_JSON.read_text())


@lru_cache(maxsize=1)
def io_struct_schema() -> dict:
    return json.loads(IO_STRUCT_JSON.read_text())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit(f"usage: python -m rlrun.rollout.engines.sglang.schema sglang-{SGLANG_VERSION}-py3-none-any.whl")
    server_args, io_struct = extract_from_wheel(argv[0])
    SERVER_ARGS_JSON.write_text(json.dumps(server_args, indent=1, sort_keys=True) + "\n")
    IO_STRUCT_JSON.write_text(json.dumps(io_struct, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SERVER_ARGS_JSON} ({len(server_args['fields'])} fields) and {IO_STRUCT_JSON}")


if __name__ == "__main__":
    main()
