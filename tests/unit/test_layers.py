"""The package layering (pyproject.toml [tool.importlinter], docs/CONTRACT.md "Layers") is checked by
import-linter, and src/rlrun has no import cycle: both run with the unit tests, so CI checks them."""
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT, text=True,
                          capture_output=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})


def test_the_layers_contract_is_kept():
    r = _lint(ROOT / "src")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 5 kept, 0 broken." in r.stdout


def _lint_with(tmp_path: Path, module: str, imported: str) -> subprocess.CompletedProcess:
    """import-linter on a copy of src/rlrun where `module` (a path under rlrun/) also imports `imported`."""
    shutil.copytree(ROOT / "src" / "rlrun", tmp_path / "rlrun", ignore=shutil.ignore_patterns("__pycache__"))
    f = tmp_path / "rlrun" / module
    f.write_text(f.read_text() + f"\n\ndef _added():\n    import {imported}  # noqa: F401\n")
    return _lint(tmp_path)


def test_the_fleet_naming_an_engine_kind_breaks_the_rollout_contract(tmp_path):
    """The finer contracts inside rollout/ can fail too: EngineGroup importing the sglang kind is reported."""
    r = _lint_with(tmp_path, "rollout/engines/group.py", "rlrun.rollout.engines.sglang.engine")
    assert r.returncode == 1 and "rlrun.rollout.engines.group -> rlrun.rollout.engines.sglang.engine" in r.stdout, \
        r.stdout + r.stderr


def test_the_fleet_naming_a_router_kind_breaks_the_router_contract(tmp_path):
    """EngineGroup importing the sglang_router kind's launcher (not the RolloutRouter protocol) is reported."""
    r = _lint_with(tmp_path, "rollout/engines/group.py", "rlrun.rollout.engines.sglang.router.router")
    assert r.returncode == 1 and \
        "rlrun.rollout.engines.group -> rlrun.rollout.engines.sglang.router.router" in r.stdout, r.stdout + r.stderr


def test_the_router_protocol_naming_a_router_kind_breaks_the_router_contract(tmp_path):
    """run_router building the sglang_router kind directly (not through its RouterKind's factory) is reported."""
    r = _lint_with(tmp_path, "rollout/routers/protocol.py", "rlrun.rollout.engines.sglang.router.router")
    assert r.returncode == 1 and "no router kind named outside its package BROKEN" in r.stdout and \
        "rlrun.rollout.routers.protocol -> rlrun.rollout.engines.sglang.router.router" in r.stdout, r.stdout + r.stderr


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The check can fail: config (the ground floor) importing the runner is reported."""
    r = _lint_with(tmp_path, "config/errors.py", "rlrun.runner")
    assert r.returncode == 1 and "rlrun.config.errors -> rlrun.runner" in r.stdout, r.stdout + r.stderr


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        scc.append(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        out.append(sorted(scc))
    return out


def test_no_import_cycle_in_src_rlrun():
    graph = grimp.build_graph("rlrun", cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]
