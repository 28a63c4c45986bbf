"""Every name a module uses is defined: pyflakes' undefined-name checks over rlrun's source, the GPU tests and the
device tools. Most of that code never runs here (megatron-core and SGLang are CUDA-only), so a name lost in a merge
(2026-11-28: `trainer_teacher` used but not imported in the megatron backend, found only when a four-GPU run died
in its first second) would otherwise surface on the lent GPUs. Only the undefined-name family is checked: unused
imports and the like are style."""
from __future__ import annotations

from pathlib import Path

import pytest
from pyflakes import api, messages, reporter

ROOT = Path(__file__).resolve().parents[2]
TREES = ["src/rlrun", "tests/gpu", "tools/device", "bench"]
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(reporter.Reporter):
    def __init__(self):
        self.found: list[str] = []

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(str(message))

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")


def _files():
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


def test_the_trees_hold_code():
    assert len(_files()) > 200  # the globs above find the source (a moved tree would make the check below vacuous)


@pytest.mark.parametrize("tree", TREES)
def test_no_module_uses_an_undefined_name(tree):
    out = _Collect()
    for path in sorted((ROOT / tree).rglob("*.py")):
        api.checkPath(str(path), out)
    assert out.found == [], "\n".join(out.found)


def test_the_check_finds_a_lost_import(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def init(cfg):\n    return trainer_teacher(cfg)\n")
    out = _Collect()
    api.checkPath(str(bad), out)
    assert len(out.found) == 1 and "trainer_teacher" in out.found[0]
