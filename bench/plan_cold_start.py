"""Cold start of `rlrun plan`: a fresh interpreter per run (imports, Hydra composition, validation, plan,
output), as a user types it. Prints the median and the spread, with the composition cache warm ("repeat") and empty
("first": a fresh, empty RLRUN_CACHE_DIR per run, so Hydra composes and the cache is written, as the first `rlrun plan`
of an override list does); target (issue 34): `rlrun plan` under 0.5 s cold, "first" included.
"Cold" is a new process, not a new install: the children write and read .pyc files as an installed rlrun does
(PYTHONDONTWRITEBYTECODE is dropped from their environment: with it set and no __pycache__, as in a fresh git
checkout on this machine, every run compiles ~50 modules from source, +0.13 s).

    python bench/plan_cold_start.py [--runs 15] [-- extra overrides]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


CACHE = tempfile.mkdtemp(prefix="rlrun-bench-cache-")
CPU: list[float] = []  # CPU seconds (user + sys) of each child: what the wall time is on an idle machine


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_runs(args: list[str], runs: int, cache: bool = True) -> list[float]:
    times = []
    env = dict(os.environ, RLRUN_CACHE_DIR=CACHE, RLRUN_NO_CACHE="0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for _ in range(runs):
        if not cache:  # an empty composition cache: Hydra composes, the key is computed and the entry written
            env["RLRUN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlrun-bench-empty-")
        t0, c0 = time.perf_counter(), _child_cpu()
        r = subprocess.run([sys.executable, "-m", "rlrun.cli", *args], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - t0)
        CPU.append(_child_cpu() - c0)
        if not cache:
            shutil.rmtree(env["RLRUN_CACHE_DIR"], ignore_errors=True)
        if r.returncode != 0:
            raise SystemExit(f"rlrun {' '.join(args)} failed: {r.stderr.decode()[-2000:]}")
    return times


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    cases = {"plan --json (seed recipe)": ["plan", "--json", "experiment=qwen3-4b-grpo-mi300x", *a.overrides],
             "plan, rich tables (seed recipe)": ["plan", "experiment=qwen3-4b-grpo-mi300x", *a.overrides],
             "plan --json (default CPU job)": ["plan", "--json", *a.overrides],
             "plan, rich tables (default CPU job)": ["plan", *a.overrides]}
    time_runs(["plan", "--json"], 2)  # warm the OS file cache and .pyc files: "cold" = new process, not new disk
    load = os.getloadavg()[0]
    print(f"load average before: {load:.2f} on {os.cpu_count()} cores")
    # "repeat": the overrides were composed before (composition cache hit, no Hydra import);
    # "first": an empty cache, Hydra composes (what a new override list costs).
    for cache in (True, False):
        for name, args in cases.items():
            CPU.clear()
            t = sorted(time_runs(args, a.runs, cache))
            print(f"{name} [{'repeat' if cache else 'first'}]: wall median {statistics.median(t):.3f} s "
                  f"(min {t[0]:.3f}, max {t[-1]:.3f}); CPU median {statistics.median(CPU):.3f} s ({a.runs} runs)")
    baseline = sorted(time_runs_python(a.runs))
    print(f"python -c pass (interpreter start-up alone): median {statistics.median(baseline):.3f} s")


def time_runs_python(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"])
        out.append(time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    main()
