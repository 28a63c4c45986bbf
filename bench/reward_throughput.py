"""Reward scoring throughput: N deepscaler samples through rlrun.reward.score_batch.

The responses look like a reasoning model's: ~1.5 KB of thinking, `</think>`, then a boxed
answer. The mix: 40% correct in the label's own form, 20% correct in an equivalent form
(1/2 vs 0.5, \\dfrac, reordered sums), 30% wrong (these always go through math-verify), 10% with
no usable answer (no `</think>` or no box). Run: `python bench/reward_throughput.py --n 10000`;
`--append-docs` appends the result table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time
from datetime import datetime, timezone
from pathlib import Path

from rlrun.reward import RewardPool, score, score_batch

EQUIVALENT = [("0.5", "\\frac{1}{2}"), ("\\frac{3}{4}", "0.75"), ("2x+1", "1+2x"), ("\\sqrt{4}", "2"),
              ("\\dfrac{1}{3}", "\\frac{1}{3}"), ("(1,2)", "(1, 2)"), ("10", "10.0"), ("x^2-1", "(x-1)(x+1)")]
FILLER = ("We consider the problem carefully. Let a = 3 and b = 4, so a^2 + b^2 = 25 and the hypotenuse "
          "is 5. Checking the constraint again gives the same value. ")


def make_samples(n: int, seed: int):
    rng = random.Random(seed)
    responses, labels, kinds = [], [], []
    for _ in range(n):
        u = rng.random()
        label = str(rng.randint(1, 999))
        answer = label
        if u < 0.4:
            kind = "correct"
        elif u < 0.6:
            kind, (label, answer) = "equivalent", rng.choice(EQUIVALENT)
        elif u < 0.9:
            kind, answer = "wrong", rng.choice([str(rng.randint(1000, 9999)), "\\frac{7}{9}", "x+3", "\\sqrt{5}"])
        else:
            kind = "no_answer"
        think = "<think>" + FILLER * rng.randint(5, 15) + "</think>"
        body = f"So the final answer is $\\boxed{{{answer}}}$."
        if kind == "no_answer":
            think, body = (think, "I could not finish.") if rng.random() < 0.5 else ("", body)
        responses.append(think + "\n" + body)
        labels.append(label)
        kinds.append(kind)
    return responses, labels, kinds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--append-docs", action="store_true")
    a = ap.parse_args(argv)
    responses, labels, kinds = make_samples(a.n, a.seed)
    t0 = time.monotonic()
    with RewardPool(num_workers=a.workers) as pool:
        start_s = time.monotonic() - t0
        metrics = {}
        t1 = time.monotonic()
        scores = score_batch("deepscaler", responses, labels, pool=pool, timeout_s=a.timeout, metrics=metrics)
        batch_s = time.monotonic() - t1
    k = min(a.n, 1000)  # in-process reference on a slice (no pool, no time limit)
    t2 = time.monotonic()
    ref = [score("deepscaler", r, y) for r, y in zip(responses[:k], labels[:k])]
    single_s = (time.monotonic() - t2) / k * a.n
    assert ref == scores[:k], "pool and in-process scores differ"
    by_kind = {kd: sum(s for s, x in zip(scores, kinds) if x == kd) / max(1, kinds.count(kd)) for kd in sorted(set(kinds))}
    lines = [
        f"## Reward throughput (bench/reward_throughput.py, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"{a.n} deepscaler samples (~1.5 KB each: thinking, `</think>`, boxed answer; 40% correct, 20% equivalent "
        f"form, 30% wrong, 10% no answer) on {platform.machine()}, {os.cpu_count()} CPU cores (shared with other "
        f"work while measured), math-verify 0.9.0, per-sample limit {a.timeout:.0f} s.",
        "",
        "| mode | wall time | samples/s |",
        "|---|---|---|",
        f"| score_batch, RewardPool({a.workers} workers) | {batch_s:.1f} s | {a.n / batch_s:.0f} |",
        f"| in-process `score` loop, 1 core (extrapolated from {k}) | {single_s:.1f} s | {a.n / single_s:.0f} |",
        "",
        f"Pool start-up (spawn + importing math-verify/sympy): {start_s:.1f} s, once per process. "
        f"Timeouts: {metrics['reward/timeouts']}, errors: {metrics['reward/errors']}. Mean score by kind: "
        + ", ".join(f"{kd} {v:.2f}" for kd, v in by_kind.items()) + ".",
        "",
    ]
    print("\n".join(lines))
    if a.append_docs:
        docs = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
        with docs.open("a") as f:
            f.write(("\n" if docs.exists() and docs.stat().st_size else "") + "\n".join(lines))
        print(f"appended to {docs}")


if __name__ == "__main__":
    main()
