"""Rollout throughput through the whole path: async client -> real sglang-router -> hf engines.

    python bench/rollout_throughput.py --engines 1 2 --requests 256 --max-new-tokens 32
Per engine count, one JSON line: requests, output tokens, seconds, tokens/s, request latency p50/p95.
Every request generates exactly its max_new_tokens (ignore_eos) so runs are comparable; --vary
draws each request's length uniformly from [1, max_new_tokens] (fixed seed), as RL responses vary.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlrun.rollout.client import RolloutClient  # noqa: E402
from rlrun.rollout.engines.group import local_engine_group  # noqa: E402
from rlrun.rollout.tiny_model import save_tiny_model  # noqa: E402


async def rollout(url: str, n: int, max_new: int, concurrency: int, vary: bool) -> tuple[float, list[float], int]:
    rng = random.Random(0)
    # vary: response lengths uniform in [1, max_new], as RL responses differ (fixed seed: same work)
    lengths = [rng.randint(1, max_new) if vary else max_new for _ in range(n)]
    latencies: list[float] = []
    tokens = 0
    async with RolloutClient(url, max_concurrency=concurrency) as client:
        async def one(i: int):
            nonlocal tokens
            t = time.perf_counter()
            body = {"sampling_params": {"max_new_tokens": lengths[i], "temperature": 1.0, "ignore_eos": True},
                    "return_logprob": True, "input_ids": [3 + i % 30, 4, 5, 6, 7, 8, 9, 10]}
            out = await client.post("/generate", body)
            latencies.append(time.perf_counter() - t)
            tokens += len(out["output_ids"])

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t0, latencies, tokens


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--engines", type=int, nargs="+", default=[1, 2])
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch threads per engine process")
    p.add_argument("--vary", action="store_true", help="response lengths uniform in [1, max-new-tokens]")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rlrun-tput-"))
    model_dir = save_tiny_model(tmp / "tiny")
    for n_engines in args.engines:
        with local_engine_group(model_dir, n_engines, router="sglang_router",
                                log_dir=tmp / "logs", threads=args.threads,
                                health_interval_s=60) as group:
            url = group.router.url
            asyncio.run(rollout(url, 16, 4, 16, False))  # warm-up
            seconds, lat, tokens = asyncio.run(rollout(url, args.requests, args.max_new_tokens,
                                                       args.concurrency, args.vary))
        lat.sort()
        print(json.dumps({"engines": n_engines, "requests": args.requests, "output_tokens": tokens,
                          "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
                          "latency_p50_s": round(statistics.median(lat), 3),
                          "latency_p95_s": round(lat[int(0.95 * (len(lat) - 1))], 3),
                          "model": "tiny Qwen3 (2 layers, hidden 32)", "threads_per_engine": args.threads,
                          "vary": args.vary, "concurrency": args.concurrency}), flush=True)

if __name__ == "__main__":
    main()
