"""Function-level imports of rlrun's own modules: an AST count of `import rlrun...` / `from rlrun... import` (and
relative imports) statements inside a function body, over src/rlrun (docs/benchmarks.md, issue 34).

    python bench/function_imports.py [SRC_DIR] [--list]
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path


def function_imports(src: Path) -> list[tuple[str, int, str]]:
    """(file, line, the imported module) of every such statement, in file order."""
    out = []
    for f in sorted(src.rglob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         ["." * node.level + (node.module or "")] if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    if name.startswith(("rlrun.", ".")) or name == "rlrun":
                        out.append((str(f.relative_to(src.parent)), node.lineno, name))
    return sorted(set(out))  # a nested function's import is seen from its enclosing one too: counted once


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--list"]
    src = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "src" / "rlrun"
    found = function_imports(src)
    if "--list" in sys.argv:
        for f, line, name in found:
            print(f"{f}:{line} {name}")
    print(f"{len(found)} function-level imports of rlrun's own modules in {src}")
