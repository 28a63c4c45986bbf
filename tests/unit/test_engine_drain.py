"""EngineGroup.drain against a real hf engine process behind the real sglang-router: a weight update or a memory
release must find the engine idle (SGLang 0.5.16 asserts it, and its scheduler dies on a busy engine: seen on the
lent H200s, 2026-11-28, in the sync loop at rollout 34 and in a colocated Qwen3-4B run at rollout 4), so the driver
waits for /flush_cache to succeed, bounded, and a never-idle engine ends in a diagnosis naming it and its load."""
from __future__ import annotations

import threading
import time

import pytest
import requests

from rlrun.rollout.engines.group import WeightSyncStuck

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def group(hf_engine_group):
    return hf_engine_group


def _generate_in_background(url: str) -> tuple[threading.Thread, list]:
    out: list = []

    def go():
        out.append(requests.post(f"{url}/generate", timeout=60, json={
            "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}))
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _wait_busy(url: str, timeout_s: float = 10.0) -> None:
    t0 = time.monotonic()
    while requests.post(f"{url}/flush_cache", timeout=10).status_code == 200:
        assert time.monotonic() - t0 < timeout_s, "the request never reached the engine"
        time.sleep(0.01)


def test_an_idle_engine_drains_at_once(group):
    # idle: one /flush_cache per engine (a local HTTP call, milliseconds); 1 s leaves room for a loaded 2-core machine
    assert group.drain(timeout_s=5) < 1.0
    assert requests.post(f"{group.urls[0]}/flush_cache", timeout=10).status_code == 200


def test_a_busy_engine_is_waited_for_and_a_never_idle_one_ends_in_a_diagnosis(group):
    url = group.urls[0]
    group.pause("in_place")  # a request that arrives now waits in the engine's queue: the engine stays busy
    t, out = _generate_in_background(url)
    try:
        _wait_busy(url)
        t0 = time.monotonic()
        with pytest.raises(WeightSyncStuck) as e:
            group.drain(timeout_s=0.5)
        # it waits its bound (0.5 s) and no longer than the bound + one 0.05 s poll + the diagnosis's /get_load (a
        # local HTTP call): 5 s is that with room for a loaded machine, far below an unbounded wait
        assert 0.5 <= time.monotonic() - t0 < 5
        msg = str(e.value)
        assert url in msg and "0 running / 1 waiting" in msg and "rollout.weight_sync_timeout_s" in msg
        # the engine finishes its request once generation continues, and the drain then returns
        threading.Timer(0.3, group.continue_generation).start()
        waited = group.drain(timeout_s=30)
        assert waited >= 0.2  # generation continues 0.3 s after the drain starts: it waited for that, not at all before
    finally:
        group.continue_generation()
        t.join(timeout=60)
    assert out and out[0].status_code == 200 and len(out[0].json()["output_ids"]) == 4


def test_a_settle_returns_at_its_bound_with_the_engine_still_busy(group):
    """must=False (the lend's settle before the pause): the same wait, but its end is not an error."""
    url = group.urls[0]
    group.pause("in_place")
    t, out = _generate_in_background(url)
    try:
        _wait_busy(url)
        t0 = time.monotonic()
        waited = group.drain(timeout_s=0.3, must=False)
        assert 0.3 <= waited < 5 and time.monotonic() - t0 < 5  # its bound + one poll, with room for a loaded machine
        assert requests.post(f"{url}/flush_cache", timeout=10).status_code != 200  # still busy: nothing was forced
    finally:
        group.continue_generation()
        t.join(timeout=60)
    assert out and out[0].status_code == 200
