"""User code named in the config: one loader for every reference (data.rm_type and eval rm_types,
rollout.generate_fn, data.source, ...), in either form

    package.module:name        imported (the module must be importable: installed or on PYTHONPATH)
    path/to/file.py:name       the file executed as a module (its folder put on sys.path, so its own
                               imports of neighbouring files work)

`load` runs in the process that calls the function; `problems` is the preflight's check of the same
reference without executing it (no torch or ray; the user's module may import them): the file or module is
found and its source defines `name` at top level (def, class, assignment or import), read with `ast`.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

_LOADED: dict[str, object] = {}   # spec -> object: a file is executed once per process


def split(spec: str) -> tuple[str, str]:
    """'target:name' -> (target, name); ValueError when it is not one of the two forms."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr or not attr.isidentifier():
        raise ValueError(f"{spec!r} is not 'package.module:name' or 'path/to/file.py:name'")
    return target, attr


def is_file_form(target: str) -> bool:
    return target.endswith(".py")


def load(spec: str, what: str):
    """The object `spec` names; ValueError naming `what` (e.g. "custom reward") with what is missing and the fix."""
    if spec in _LOADED:
        return _LOADED[spec]
    try:
        target, attr = split(spec)
    except ValueError as e:
        raise ValueError(f"{what} {e}") from None
    if is_file_form(target):
        path = Path(target)
        if not path.is_file():
            raise ValueError(f"{what} {spec!r}: file {target} does not exist")
        folder = str(path.resolve().parent)  # the file's own imports of its neighbours work, as when run there
        if folder not in sys.path:
            sys.path.insert(0, folder)
        mod_spec = importlib.util.spec_from_file_location(f"rlrun_user_{path.stem}", path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module  # dataclasses and pickling look the module up by name
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise ValueError(f"{what} {spec!r}: cannot import {target!r} ({e}); install it or put its folder on "
                             f"PYTHONPATH, or name the file: 'path/to/{target.split('.')[-1]}.py:{attr}'") from e
    obj = getattr(module, attr, None)
    if not callable(obj):
        raise ValueError(f"{what} {spec!r}: {target} has no function or class {attr!r}")
    _LOADED[spec] = obj
    return obj


def problems(spec: str) -> list[tuple[str, str]]:
    """(message, fix) for each reason `load(spec)` would fail, found without running the user's code."""
    try:
        target, attr = split(spec)
    except ValueError as e:
        return [(str(e), "write it as 'package.module:function' or '/path/to/file.py:function'")]
    if is_file_form(target):
        path = Path(target).expanduser()
        if not path.is_file():
            return [(f"file {target} of {spec!r} does not exist", f"fix the path (an absolute path is safest)")]
        source = path
    else:
        try:
            found = importlib.util.find_spec(target)  # imports the parent packages, not the module itself
        except (ImportError, ValueError) as exc:
            found, why = None, f" ({exc})"
        else:
            why = ""
        if found is None:
            return [(f"module {target!r} of {spec!r} cannot be imported on this machine{why}",
                     f"install it or put its folder on PYTHONPATH, or name the file: "
                     f"'/path/to/{target.split('.')[-1]}.py:{attr}'")]
        if not found.origin or not found.origin.endswith(".py"):
            return []  # a compiled or namespace module: its names cannot be read without importing it
        source = Path(found.origin)
    try:
        names = defined_names(source.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return [(f"{source} of {spec!r} cannot be read as Python ({type(exc).__name__}: {exc})", "fix the file")]
    if names is not None and attr not in names:
        near = sorted(n for n in names if not n.startswith("_"))[:8]
        return [(f"{source} defines no {attr!r} at top level (it defines {near or 'nothing public'})",
                 f"fix the name after ':' or add `def {attr}(...)` to {source.name}")]
    return []


def defined_names(source: str) -> set[str] | None:
    """Names a module's top level binds (def, class, assignment, import, also under if/try); None when it
    defines a module __getattr__ or star-imports (any name may exist)."""
    names: set[str] = set()

    def visit(body) -> bool:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in (getattr(node, "body", []), getattr(node, "orelse", []), getattr(node, "finalbody", []),
                             *(h.body for h in getattr(node, "handlers", []))):
                    if not visit(part):
                        return False
        return True

    if not visit(ast.parse(source).body):
        return None
    return None if "__getattr__" in names else names
