"""SGLang lives in one package (issue 34's acceptance: `grep -rln sglang src/rlrun` outside the SGLang package finds
only docs strings and the slime interop). Outside rlrun/rollout/engines/sglang/ (the sglang engine kind and the
sglang_router router kind) and the slime interop (rlrun/interop/: slime's scripts, read with their bash, which
may run `sglang`; rlrun/agent/slime_*.py: slime's own names, sglang_router_ip and the rest, are its vocabulary), no code of src/rlrun names SGLang: no identifier, import,
string literal or message, in any case. Docstrings and comments may (they say what the wire format follows).
A message or value that needs SGLang belongs on the kind's spec (rlrun.config.kinds.EngineKind / RouterKind).
The config key rollout.sglang is no exception here: the sglang kind contributes it (EngineKind.args_key)."""
import ast
import io
import tokenize
from pathlib import Path

RLRUN = Path(__file__).resolve().parents[2] / "src" / "rlrun"
NAME = "sglang"


def exempt(rel: str) -> bool:
    """The SGLang package and the slime interop (paths relative to src/rlrun, '/'-separated)."""
    return rel.startswith(("rollout/engines/sglang/", "interop/", "agent/slime_"))


def code_mentions(source: str) -> list[tuple[int, str]]:
    """(line, token) of every token of `source` that names SGLang, comments and docstrings left out."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.add((first.lineno, first.col_offset))
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type != tokenize.COMMENT and not (tok.type == tokenize.STRING and tok.start in docstrings)
            and NAME in tok.string.lower()]


def test_the_check_sees_code_and_skips_docs():
    source = ('"""Follows SGLang\'s API."""\n'
              'import sglang_router  # the sglang router\n'
              'def f(x):\n'
              '    """SGLang\'s /generate."""\n'
              '    kind = "sglang"\n'
              '    raise ValueError(f"{x}: SGLang knows")\n'
              'sglang_args = 1\n')
    # lines only: Python 3.12 splits an f-string into several tokens (the mention is one of them)
    assert [line for line, _ in code_mentions(source)] == [2, 5, 6, 7]
    assert exempt("rollout/engines/sglang/router/router.py") and exempt("interop/slime_sglang.py")
    assert not exempt("rollout/engines/hf/spec.py") and not exempt("agent/rules.py")


def test_no_code_outside_the_sglang_package_and_the_slime_interop_names_sglang():
    found, checked = [], 0
    for path in sorted(RLRUN.rglob("*")):
        rel = path.relative_to(RLRUN).as_posix()
        if not path.is_file() or "__pycache__" in rel or exempt(rel):
            continue
        checked += 1
        if path.suffix == ".py":
            found += [f"{rel}:{line}: {tok}" for line, tok in code_mentions(path.read_text())]
        elif NAME in path.read_text(errors="replace").lower():  # data files: any mention is a value
            found.append(rel)
    assert checked > 100  # the tree was walked
    assert found == [], "\n".join(found)
