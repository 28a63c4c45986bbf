"""What the README and the code's comments say against what the repo holds: every config group option is
listed in the README's config tree, the README's count of the tests that skip without Chromium is the real
one, and no file cites the project-internal notes (REFERENCE.md, DESIGN.md), which are not in the repo."""
import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4}


def _tree_block(group: str) -> str:
    lines = README.split("## The config tree", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"conf/{group}/"))
    block = [lines[start].split(f"conf/{group}/", 1)[1]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 10) or line.strip().startswith("conf/"):
            break
        block.append(line)
    return " ".join(block)


def _listed(text: str) -> set[str]:
    """Names in a README line, `qwen3-0.6b/1.7b/4b` standing for qwen3-0.6b, qwen3-1.7b, qwen3-4b."""
    text = re.sub(r"\([^)]*\)", " ", text)  # drop the explanations in parentheses
    out = set()
    for token in re.findall(r"[a-z0-9][a-z0-9._\-/]*", text):
        first, *rest = token.split("/")
        out.add(first.rstrip("."))
        prefix = first.rsplit("-", 1)[0] + "-" if "-" in first else ""
        out.update(prefix + r.rstrip(".") for r in rest)
    return out


def test_the_readme_lists_every_option_of_every_config_group():
    for group_dir in sorted(p for p in (ROOT / "conf").iterdir() if p.is_dir()):
        options = {f.stem for f in group_dir.glob("*.yaml")}
        missing = options - _listed(_tree_block(group_dir.name))
        assert not missing, f"README's config tree omits conf/{group_dir.name}/ {sorted(missing)}"


def test_the_readme_counts_the_tests_that_skip_without_chromium():
    m = re.search(r"for the (\w+) tests? that render", README)
    assert m, "the README no longer says which tests need Chromium"
    said = WORDS.get(m.group(1), m.group(1))
    rendering = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        if "chromium" not in text.lower():
            continue
        tree = ast.parse(text)
        helpers = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("test_")
                   and "chromium" in ast.get_source_segment(text, f).lower()}
        for f in tree.body:
            if isinstance(f, ast.FunctionDef) and f.name.startswith("test_"):
                called = {n.func.id for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                if called & helpers:
                    rendering.append(f"{path.name}::{f.name}")
    assert len(rendering) == said, rendering


def test_no_file_cites_the_internal_notes():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    citing = []
    for name in files:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ".json") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if name != "tests/unit/test_docs_drift.py" and re.search(r"\b(REFERENCE|DESIGN)\.md\b", text):
            citing.append(name)
    assert citing == [], f"cite the repo's docs or public sources instead: {citing}"
