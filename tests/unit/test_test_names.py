"""Every test module's basename is unique across tests/: pytest imports them by basename (rootdir-relative, no
packages), so two files of one name in tests/unit and tests/gpu make the second an "import file mismatch" error
in the full run (it happened with test_megatron_lora.py on 2026-11-28) while each directory passes alone."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique():
    where = defaultdict(list)
    for f in TESTS.rglob("test_*.py"):
        where[f.name].append(str(f.relative_to(TESTS)))
    assert {n: p for n, p in where.items() if len(p) > 1} == {}
    assert len(where) > 100  # the walk found the suite (1575 tests in ~200 modules)
