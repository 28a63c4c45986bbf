"""Remote reward model over HTTP: POST {prompt, response, label, metadata} as JSON to a URL.

The server answers a number, or an object with a "reward" or "score" field. Each request has a
timeout and is retried with exponential backoff (slime/rollout/rm_hub `remote_rm`); a sample
whose retries are all spent scores 0 and is counted as an error instead of crashing the run.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


def parse_reward(body) -> float:
    if isinstance(body, bool):
        return float(body)
    if isinstance(body, (int, float)):
        return float(body)
    if isinstance(body, dict):
        for key in ("reward", "score"):
            if isinstance(body.get(key), (int, float)):
                return float(body[key])
    raise ValueError(f"remote reward: expected a number or {{'reward': x}}, got {str(body)[:200]!r}")


async def _post(session, url, payload, timeout_s, max_retries, backoff_s):
    import aiohttp

    last = None
    for attempt in range(max_retries + 1):
        try:
            async with session.post(url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                resp.raise_for_status()
                return parse_reward(await resp.json(content_type=None)), "ok"
        except Exception as e:  # noqa: BLE001 - any failure is retried, then counted
            last = e
            if attempt < max_retries:
                await asyncio.sleep(min(backoff_s * 2**attempt, 10.0))
    kind = "timeout" if isinstance(last, asyncio.TimeoutError) else "error"
    log.warning("remote reward %s failed after %d attempts: %r", url, max_retries + 1, last)
    return 0.0, kind


async def remote_scores(url: str, payloads: list[dict], timeout_s: float, max_retries: int,
                        concurrency: int = 64, backoff_s: float = 0.2) -> list[tuple[float, str]]:
    """Score all payloads concurrently; returns (score, "ok" | "timeout" | "error") per payload."""
    import aiohttp

    sem = asyncio.Semaphore(concurrency)

    async def one(session, payload):
        async with sem:
            return await _post(session, url, payload, timeout_s, max_retries, backoff_s)

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(one(session, p) for p in payloads)))
