"""Re-measure the numbers README.md and docs/*.md quote about the test suite and the CLI, on this tree.

    python tools/measure_docs.py                      # the cheap ones (~1-2 min): counts, skips, plan/sweep timings
    python tools/measure_docs.py --junit SUITE.xml    # + the suite's totals, its slowest files and tests
    python tools/measure_docs.py --default-job        # + the default job (`rlrun`, ~1 min)

Where each number lives (update them from this script's output):

| number | where |
|---|---|
| tests collected; "N passed, M skipped" and minutes of the README's test command | docs/benchmarks.md, last "README's test command" section (from --junit: the clean-clone run) |
| the Chromium skips ("the two tests that render ...") | README.md "The two commands" (its count: tests/unit/test_docs_drift.py) |
| GPU tests skipped here (tests/gpu skips without CUDA) | README.md "The two commands" |
| `rlrun plan` cold start (~0.2-0.5 s) | README.md "Everyday commands", docs/benchmarks.md "Config layer" |
| a 1,000-point sweep validates in ~1.6 s | docs/config.md "Sweeps", docs/benchmarks.md "Config layer" |
| the default job: loop ~22 s, whole command ~45-70 s | README.md "The two commands" (--default-job) |
| per-file times: test_data_toy_learn (3 s), test_replay (~70 s), test_engine_node_loss (~40-100 s) | docs/data.md, docs/observability.md, docs/rollout.md (from --junit) |

The suite itself is not run here (20 min): the README's command with `--junitxml` makes the file --junit reads:

    .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=40 --junitxml=/tmp/suite.xml tests
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# the per-file times the docs quote (docs/data.md, docs/observability.md, docs/rollout.md)
QUOTED_FILES = ("tests/unit/test_data_toy_learn.py", "tests/integration/test_replay.py",
                "tests/integration/test_engine_node_loss.py")


def sh(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def pytest_summary(text: str) -> dict[str, int]:
    """pytest's last line ("3 passed, 2 skipped in 1.2s") -> {"passed": 3, "skipped": 2}."""
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|skipped|failed|error)", line)]
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped|failed|errors?|deselected)", last[-1])} if last else {}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def collected() -> None:
    r = sh(PY, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests")
    m = re.search(r"(\d+) tests? collected", r.stdout)
    print(f"tests collected: {m.group(1) if m else '?'} ({r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]})")
    per_dir = collections.Counter(line.split("/")[1] for line in r.stdout.splitlines() if line.startswith("tests/"))
    print("  per directory: " + ", ".join(f"tests/{d} {n}" for d, n in sorted(per_dir.items())))


def skips() -> None:
    r = sh(PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/gpu")
    print(f"tests/gpu here: {pytest_summary(r.stdout)}")
    # the README's count of the tests that skip without Chromium is checked against the tests' source by
    # tests/unit/test_docs_drift.py; here: whether they ran on this machine
    r = sh(PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/unit/test_report.py")
    chromium = [line for line in r.stdout.splitlines() if line.startswith("SKIPPED") and "hromium" in line]
    print(f"tests/unit/test_report.py: {pytest_summary(r.stdout)}; Chromium on PATH: "
          f"{shutil.which('chromium') or shutil.which('chromium-browser') or 'no'}; skipped for it: {len(chromium)}")
    for line in chromium:
        print(f"  {line[:200]}")


def bench() -> None:
    for script in ("bench/plan_cold_start.py", "bench/sweep_validate.py"):
        r = sh(PY, script, timeout=600)
        print(f"$ python {script}  (load average {load()})")
        print("  " + "\n  ".join((r.stdout + r.stderr).strip().splitlines()[-12:]))


def default_job() -> None:
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"measure-docs-{os.getpid()}"
    t0 = time.monotonic()
    r = sh(PY, "-m", "rlrun.cli", f"run.output_dir={out}", "logging.wandb.mode=disabled", timeout=900)
    took = time.monotonic() - t0
    metrics = sorted(out.glob("*/*/metrics.jsonl"))
    if metrics:
        import json

        rows = [json.loads(line) for line in metrics[-1].read_text().splitlines()]
        loop = [r_["time/step_s"] for r_ in rows if "time/step_s" in r_]
        first, last = (statistics.mean(r_["rollout/reward_mean"] for r_ in rows[s]) for s in (slice(0, 5), slice(-5, None)))
        print(f"default job: rc {r.returncode}, whole command {took:.1f} s, loop {sum(loop):.1f} s over {len(loop)} "
              f"rollouts, reward {first:.3f} (first 5) -> {last:.3f} (last 5)  (load average {load()})")
    else:
        print(f"default job: rc {r.returncode}, no metrics; {(r.stdout + r.stderr)[-1000:]}")


def junit(path: Path) -> None:
    """Totals of a suite run, its slowest files (the sum of their tests' times) and tests, and the quoted files."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = collections.Counter()
    for s in suites:
        for k in ("tests", "failures", "errors", "skipped"):
            totals[k] += int(s.get(k, 0))
        totals["time"] += float(s.get("time", 0))
    passed = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    print(f"{path}: {passed} passed, {totals['skipped']} skipped, {totals['failures']} failed, {totals['errors']} "
          f"errors; {totals['time'] / 60:.1f} min wall (pytest's own clock)")
    per_file, per_test = collections.Counter(), []
    for case in root.iter("testcase"):
        f = case.get("classname", "").replace(".", "/")
        f = re.sub(r"/(Test\w+)$", "", f) + ".py"
        t = float(case.get("time", 0))
        per_file[f] += t
        per_test.append((t, f"{f}::{case.get('name')}"))
    print(f"test time summed over the workers: {sum(per_file.values()) / 60:.1f} min")
    print("slowest files (sum of their tests):")
    for f, t in per_file.most_common(15):
        print(f"  {t:7.1f} s  {f}")
    print("slowest tests:")
    for t, name in sorted(per_test, reverse=True)[:15]:
        print(f"  {t:7.1f} s  {name}")
    print("files the docs quote: " + ", ".join(f"{f} {per_file.get(f, float('nan')):.1f} s" for f in QUOTED_FILES))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--junit", type=Path, help="the --junitxml file of a run of the README's test command")
    p.add_argument("--default-job", action="store_true", help="also run the default job (~1 min)")
    a = p.parse_args()
    print(f"tree {sh('git', 'rev-parse', '--short', 'HEAD').stdout.strip()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {load()} on {os.cpu_count()} cores")
    collected()
    skips()
    bench()
    if a.default_job:
        default_job()
    if a.junit:
        junit(a.junit)
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
