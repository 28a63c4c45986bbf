"""A 1,000-point sweep validated (and planned) but not launched: `rlrun validate -m optim.lr=range(1,1001)`
in a fresh process, start-up included. Target: <= 5 s on the 2-core dev machine.

    python bench/sweep_validate.py [--points 1000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--points", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    # Two axes, so that the grid really is a product: 250 learning rates x 4 group sizes.
    n_lr = a.points // 4
    cmd = [sys.executable, "-m", "rlrun.cli", "validate", "-m", f"optim.lr=range(1,{n_lr + 1})",
           "rollout.n_samples_per_prompt=2,4,8,16"]
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
    print(r.stdout.strip())
    print(f"{n_lr * 4} points validated + planned: median {statistics.median(times):.2f} s, "
          f"min {min(times):.2f} s ({a.repeats} runs, process start-up included)")


if __name__ == "__main__":
    main()
