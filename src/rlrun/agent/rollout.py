"""The runner's side of rollout.generate_fn: run a generate function over a batch of samples.

Each PENDING sample goes through the function concurrently (bounded by the client's
rollout.max_concurrency semaphore) with a handle of its own seed sequence; samples that are no
longer PENDING (a buffered group of a data.source) are left as they are. Returns the client's
retries and the counters the function added (rollout/turns, rollout/tool_*).
"""
from __future__ import annotations

import asyncio

from rlrun.agent.handle import HTTPHandle
from rlrun.data.sample import Sample, Status
from rlrun.rollout.client import RolloutClient


def generate(fn, url: str, rollout_cfg, tokenizer, samples: list[Sample], sampling, seeds: list[int],
             model_path: str | None = None) -> dict[str, float]:
    async def one(handle: HTTPHandle, sample: Sample, seed: int) -> None:
        out = await fn(handle.for_sample(seed), sample, sampling)
        if isinstance(out, list):
            if len(out) != 1:
                raise ValueError(f"generate function {getattr(fn, '__name__', fn)} returned {len(out)} samples for "
                                 "one prompt sample; the runner trains one sample per request (return one)")
            out = out[0]
        if out is not sample:
            sample.__dict__.update(out.__dict__)
        if sample.status is Status.PENDING:
            raise ValueError(f"generate function {getattr(fn, '__name__', fn)} left a sample PENDING; set its status")

    async def run() -> dict[str, float]:
        async with RolloutClient.from_config(url, rollout_cfg) as client:
            handle = HTTPHandle.from_config(client, tokenizer, rollout_cfg, model_path)
            await asyncio.gather(*(one(handle, s, seed) for s, seed in zip(samples, seeds)
                                   if s.status is Status.PENDING))
            return {"rollout/retries": float(client.retries), **handle.metrics}

    return asyncio.run(run())
