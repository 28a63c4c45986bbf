"""Extract megatron-core's config dataclasses and Megatron-LM's flags for them into
src/rlrun/train/megatron/megatron_config.json (what `train.megatron` is validated against).

megatron-core 0.19.2 needs Python >= 3.12 (this machine runs 3.11), so it is never imported here: the
dataclass fields are read from the wheel's source text with `ast`, as rlrun.rollout.sglang_schema reads
SGLang's ServerArgs. Regenerate after bumping the pin:

    pip download --no-deps --python-version 3.12 --only-binary=:all: megatron-core==0.19.2 -d /tmp/w
    python tools/megatron_schema.py /tmp/w/megatron_core-0.19.2-*.whl

What is read (all from the wheel, which ships megatron/training too):
  fields  TransformerConfig (with its base ModelParallelConfig), MLATransformerConfig's own fields,
          OptimizerConfig, DistributedDataParallelConfig: type, default, choices (a Literal's values or an
          Enum's member names) and whether a YAML value can say it (bool/int/float/str/lists of them, enums);
  flags   Megatron-LM's command-line flag for each field, as megatron/training/arguments.py makes it:
          TransformerConfig's through ArgumentGroupFactory (`--name`, `--no-name`/`--disable-name` for a
          bool that defaults to True, `argparse_meta` arg_names; the `exclude` list has none), the rest by
          `add_argument(..., dest=...)`; a dest that is not a field reaches one through
          core_transformer_config_from_args (`kw_args['field'] = args.dest`, argument_utils.py) or the
          DDP config's `kwargs["field"] = args.dest` (training.py).
tests/unit/test_megatron_passthrough.py re-extracts from the wheel (when present) and compares.
"""
from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

VERSION = "0.19.2"
OUT = Path(__file__).resolve().parents[1] / "src/rlrun/train/megatron/megatron_config.json"
SOURCES = {
    "ModelParallelConfig": "megatron/core/model_parallel_config.py",
    "TransformerConfig": "megatron/core/transformer/transformer_config.py",
    "MLATransformerConfig": "megatron/core/transformer/transformer_config.py",
    "OptimizerConfig": "megatron/core/optimizer/optimizer_config.py",
    "DistributedDataParallelConfig": "megatron/core/distributed/distributed_data_parallel_config.py",
}
ENUM_SOURCES = ("megatron/core/transformer/enums.py", "megatron/core/enums.py")
ARGUMENTS = "megatron/training/arguments.py"
ARGUMENT_UTILS = "megatron/training/argument_utils.py"
TRAINING = "megatron/training/training.py"
SCALARS = {"bool": "bool", "int": "int", "float": "float", "str": "str"}


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"class {name} not found; did the megatron-core pin change?")


def _enums(sources: list[str]) -> dict[str, dict]:
    out = {}
    for path, text in sources:
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and any("Enum" in ast.unparse(b) for b in node.bases):
                members = [s.targets[0].id for s in node.body
                           if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)]
                out[node.name] = {"module": path[:-3].replace("/", "."), "members": members}
    return out


def _accepts(node: ast.expr, enums: dict) -> tuple[list[str], list | None, str | None] | None:
    """(YAML kinds the annotation accepts, choices, enum name); None: not sayable in YAML."""
    text = ast.unparse(node)
    if text in SCALARS:
        return [SCALARS[text]], None, None
    if text == "None":
        return ["null"], None, None
    if text in enums:
        return ["str"], list(enums[text]["members"]), text
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        parts = [_accepts(node.left, enums), _accepts(node.right, enums)]
        return _merge(parts)
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).removeprefix("typing.")
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Literal":
            values = [ast.literal_eval(a) for a in args]
            kinds = sorted({"bool" if isinstance(v, bool) else type(v).__name__ for v in values})
            return kinds, values, None
        if head in ("Optional", "Union"):
            parts = [_accepts(a, enums) for a in args] + ([(["null"], None, None)] if head == "Optional" else [])
            return _merge(parts)
        if head in ("List", "list", "Tuple", "tuple"):
            inner = [_accepts(a, enums) for a in args if not (isinstance(a, ast.Constant) and a.value is ...)]
            return (["list"], None, None) if all(i is not None for i in inner) else None
    return None


def _merge(parts):
    if any(p is None for p in parts):
        # Union[str, list, PipelineParallelLayerLayout]: the YAML-sayable members are still accepted
        parts = [p for p in parts if p is not None]
        if not parts:
            return None
    kinds = sorted({k for p in parts for k in p[0]})
    choices = [c for p in parts if p[1] for c in p[1]] if all(p[1] or p[0] == ["null"] for p in parts) else None
    enum = next((p[2] for p in parts if p[2]), None)
    return kinds, choices or None, enum


def _default(value: ast.expr | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        for k in value.keywords:
            if k.arg == "default":
                return ast.unparse(k.value)
            if k.arg == "default_factory":
                return ast.unparse(k.value) + "()"
        return None
    return ast.unparse(value)


def _arg_names(value: ast.expr | None) -> list[str] | None:
    """`field(..., metadata={"argparse_meta": {"arg_names": [...]}})` -> the names."""
    if not (isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field")):
        return None
    for k in value.keywords:
        if k.arg == "metadata" and isinstance(k.value, ast.Dict):
            meta = dict(zip([ast.unparse(x).strip("'\"") for x in k.value.keys], k.value.values))
            if isinstance(meta.get("argparse_meta"), ast.Dict):
                am = dict(zip([ast.unparse(x).strip("'\"") for x in meta["argparse_meta"].keys],
                              meta["argparse_meta"].values))
                if "arg_names" in am:
                    return list(ast.literal_eval(am["arg_names"]))
    return None


def _fields(cls: ast.ClassDef, enums: dict) -> dict[str, dict]:
    out = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            acc = _accepts(stmt.annotation, enums)
            out[stmt.target.id] = {
                "type": ast.unparse(stmt.annotation), "default": _default(stmt.value),
                "accepts": acc[0] if acc else None, "choices": acc[1] if acc else None,
                "enum": (f"{enums[acc[2]]['module']}.{acc[2]}" if acc and acc[2] else None),
                "_arg_names": _arg_names(stmt.value),
            }
    return out


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise LookupError(f"function {name} not found; did the megatron-core pin change?")


def _factory_excludes(arguments: ast.Module, cls_name: str) -> set[str] | None:
    """The `exclude` of `ArgumentGroupFactory(cls_name, exclude=...)`, or None when no factory builds it."""
    for fn in ast.walk(arguments):
        if not isinstance(fn, ast.FunctionDef):
            continue
        lists = {s.targets[0].id: s.value for s in ast.walk(fn)
                 if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.List)}
        for call in ast.walk(fn):
            if (isinstance(call, ast.Call) and ast.unparse(call.func) == "ArgumentGroupFactory"
                    and call.args and ast.unparse(call.args[0]) == cls_name):
                kw = {k.arg: k.value for k in call.keywords}
                ex = kw.get("exclude")
                if ex is None:
                    return set()
                ex = lists.get(ex.id, ex) if isinstance(ex, ast.Name) else ex
                return set(ast.literal_eval(ex))
    return None


def _add_argument_calls(tree: ast.Module) -> list[dict]:
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else flags[0].lstrip("-").replace("-", "_")
        action = ast.unparse(kw["action"]).strip("'\"") if "action" in kw else "value"
        nargs = kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else None
        try:
            default = ast.literal_eval(kw["default"]) if "default" in kw else None
        except ValueError:
            default = ast.unparse(kw["default"])
        out.append({"flags": flags, "dest": dest, "action": action, "nargs": nargs, "cli_default": default})
    return out


def _renames(tree: ast.Module, fn_name: str, target: str) -> dict[str, tuple[str, bool]]:
    """`target['field'] = args.dest` / `= not args.dest` in fn -> {dest: (field, negated)}."""
    out = {}
    for s in ast.walk(_function(tree, fn_name)):
        if not (isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript)
                and ast.unparse(s.targets[0].value) == target and isinstance(s.targets[0].slice, ast.Constant)):
            continue
        field, v, neg = s.targets[0].slice.value, s.value, False
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not):
            v, neg = v.operand, True
        if isinstance(v, ast.Attribute) and ast.unparse(v.value) == "args" and v.attr != field:
            out.setdefault(v.attr, (field, neg))
    return out


def _ddp_function(tree: ast.Module) -> str:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and "check_for_nan_in_grad" in ast.unparse(fn):
            return fn.name
    raise LookupError("the DDP config's builder is not found in training.py")


def extract(read) -> dict:
    enums = _enums([(p, read(p)) for p in ENUM_SOURCES])
    trees = {p: ast.parse(read(p)) for p in set(SOURCES.values())}
    per_class = {c: _fields(_class(trees[p], c), enums) for c, p in SOURCES.items()}
    classes = {
        "TransformerConfig": {**per_class["ModelParallelConfig"], **per_class["TransformerConfig"]},
        "MLATransformerConfig": per_class["MLATransformerConfig"],
        "OptimizerConfig": per_class["OptimizerConfig"],
        "DistributedDataParallelConfig": per_class["DistributedDataParallelConfig"],
    }
    fields: dict[str, dict] = {}
    for cls, fs in classes.items():
        for name, facts in fs.items():
            if name in fields:
                fields[name]["classes"].append(cls)
            else:
                fields[name] = {"classes": [cls], **facts}

    arguments = ast.parse(read(ARGUMENTS))
    flags: dict[str, dict] = {}
    # TransformerConfig's flags, as ArgumentGroupFactory._build_argparse_kwargs_from_field makes them
    excluded = _factory_excludes(arguments, "TransformerConfig") or set()
    for name, facts in classes["TransformerConfig"].items():
        if name in excluded or facts["accepts"] is None and facts["_arg_names"] is None:
            continue
        is_switch = facts["accepts"] == ["bool"]
        names = facts["_arg_names"]
        if names is None:
            names = (["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
                     if is_switch and facts["default"] == "True" else ["--" + name.replace("_", "-")])
        action = ("store_false" if facts["default"] == "True" else "store_true") if is_switch else "value"
        for f in names:
            flags[f] = {"field": name, "action": action}
    # hand-written add_argument calls whose dest is a field or reaches one
    renames = _renames(ast.parse(read(ARGUMENT_UTILS)), "core_transformer_config_from_args", "kw_args")
    training = ast.parse(read(TRAINING))
    renames.update({d: r for d, r in _renames(training, _ddp_function(training), "kwargs").items() if d not in renames})
    cli_defaults: dict[str, object] = {}
    for call in _add_argument_calls(arguments):
        field, neg = (call["dest"], False) if call["dest"] in fields else renames.get(call["dest"], (None, False))
        if field is None or field not in fields:
            continue
        action = {"store_true": "store_true", "store_false": "store_false"}.get(call["action"], "value")
        if neg and action != "value":
            action = "store_false" if action == "store_true" else "store_true"
        for f in call["flags"]:
            if f.startswith("--"):
                flags.setdefault(f, {"field": field, "action": action})
        if action == "value" and call["cli_default"] is not None and not neg:
            cli_defaults.setdefault(field, call["cli_default"])
    for name, facts in fields.items():
        facts.pop("_arg_names")
        # Megatron-LM's own default for the flag, where it is not the dataclass's (e.g. optimizer_offload_fraction:
        # 1.0 on the command line, 0.0 in OptimizerConfig)
        if name in cli_defaults and repr(cli_defaults[name]) != facts["default"]:
            try:
                same = ast.literal_eval(facts["default"]) == cli_defaults[name]
            except (ValueError, SyntaxError, TypeError):
                same = False
            if not same:
                facts["cli_default"] = cli_defaults[name]
    return {"megatron_core_version": VERSION, "sources": {**SOURCES, "flags": [ARGUMENTS, ARGUMENT_UTILS, TRAINING]},
            "fields": dict(sorted(fields.items())), "flags": dict(sorted(flags.items()))}


def extract_from_wheel(wheel: str | Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        data = extract(lambda p: zf.read(p).decode())
    return json.loads(json.dumps(data))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit(f"usage: python tools/megatron_schema.py megatron_core-{VERSION}-*.whl")
    data = extract_from_wheel(argv[0])
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({len(data['fields'])} fields, {len(data['flags'])} flags)")


if __name__ == "__main__":
    main()
