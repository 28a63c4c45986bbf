"""The async rollout client against an in-process hf engine: groups, batches, retries, errors."""
import asyncio
import time

import pytest
import requests

from rlrun.data import Sample, Status
from rlrun.rollout.client import RolloutClient, RolloutError, Sampling, fill_sample
from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer
from rlrun.rollout.process import free_port
from rlrun.rollout.tiny_model import save_tiny_model


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    engine = HFEngine.from_dir(save_tiny_model(tmp_path_factory.mktemp("tiny")), seed=3)
    srv = ThreadedServer(engine)
    yield srv.start()
    srv.stop()
    engine.shutdown()


def run(coro):
    return asyncio.run(coro)


SAMPLING = Sampling(max_new_tokens=6, temperature=1.0)


def test_generate_group_returns_n_independent_samples(url):
    async def go():
        async with RolloutClient(url, max_concurrency=4) as client:
            return await client.generate_group("the cat sat", 8, SAMPLING)

    outs = run(go())
    assert len(outs) == 8 and len({o["meta_info"]["id"] for o in outs}) == 8
    assert len({tuple(o["output_ids"]) for o in outs}) > 1  # different seeds -> different samples


def test_generate_batch_fills_samples(url):
    samples = [Sample(prompt="the dog", group_id=0), Sample(prompt="", prompt_tokens=[3, 4, 5], group_id=1)]

    async def go():
        async with RolloutClient(url) as client:
            return await client.generate_batch(samples, Sampling(max_new_tokens=5, stop_token_ids=(1,)))

    done = run(go())
    assert done is not None and done[0] is samples[0]
    for s in samples:
        assert 1 <= len(s.response_tokens) <= 5
        assert len(s.rollout_logprobs) == len(s.response_tokens) == len(s.loss_mask)
        assert s.status in (Status.COMPLETED, Status.TRUNCATED)
        assert s.weight_version is None  # SGLang's "default": no weight update yet
        assert s.metadata["finish_reason"]["type"] in ("stop", "length")
    assert samples[1].metadata["finish_reason"]["type"] == "length" or samples[1].response_tokens[-1] == 1


def test_fill_sample_maps_finish_reason_to_status():
    s = Sample(prompt="p")
    fill_sample(s, {"text": "x", "output_ids": [4], "meta_info": {
        "finish_reason": {"type": "abort", "message": "m"}, "weight_version": "9",
        "output_token_logprobs": [[-0.25, 4, None]]}})
    assert s.status is Status.ABORTED
    assert s.rollout_logprobs == [-0.25] and s.weight_version == 9
    with pytest.raises(RolloutError, match="return_logprob"):
        fill_sample(Sample(prompt="p"), {"text": "", "output_ids": [1], "meta_info": {
            "finish_reason": {"type": "stop"}, "weight_version": "1"}})


def test_connection_errors_are_retried_then_reported():
    dead = f"http://127.0.0.1:{free_port()}"

    async def go():
        async with RolloutClient(dead, max_retries=2, backoff_s=0.01) as client:
            try:
                await client.generate(text="a", sampling=SAMPLING)
            finally:
                assert client.retries == 2

    with pytest.raises(RolloutError, match="failed after 3 attempts"):
        run(go())


def test_retries_go_on_for_the_retry_window():
    """max_retries=0 alone would fail at the first error; the 0.6 s window keeps retrying (backoff 0.01 s
    doubling to 0.05 s, jitter x0.5-1.5: at most 0.075 s apart, so >= 8 attempts fit in 0.6 s)."""
    dead = f"http://127.0.0.1:{free_port()}"

    async def go():
        async with RolloutClient(dead, max_retries=0, retry_window_s=0.6, backoff_s=0.01,
                                 max_backoff_s=0.05) as client:
            t0 = time.monotonic()
            try:
                await client.generate(text="a", sampling=SAMPLING)
            finally:
                assert time.monotonic() - t0 >= 0.6 and client.retries >= 8

    with pytest.raises(RolloutError, match=r"attempts over \d+ s"):
        run(go())


def test_client_errors_are_not_retried(url):
    async def go():
        async with RolloutClient(url, max_retries=3) as client:
            try:
                await client.post("/generate", {"text": "a", "sampling_params": {"top_k": 0}})
            finally:
                assert client.retries == 0

    with pytest.raises(RolloutError, match="HTTP 400"):
        run(go())


def test_per_request_timeout(url):
    async def go():
        async with RolloutClient(url, request_timeout_s=0.05, max_retries=0) as client:
            # ignore_eos: an early EOS would answer before the 0.05 s limit (1500 decode steps take > 1 s)
            await client.generate(input_ids=[3], sampling=Sampling(max_new_tokens=1500, temperature=1.0,
                                                                   ignore_eos=True))

    with pytest.raises(RolloutError, match="TimeoutError"):
        run(go())


def test_generate_batch_with_seeds_is_reproducible(url):
    def once():
        samples = [Sample(prompt="", prompt_tokens=[3, 4]) for _ in range(4)]

        async def go():
            async with RolloutClient(url) as client:
                await client.generate_batch(samples, Sampling(max_new_tokens=6), seeds=[11, 12, 13, 14])

        run(go())
        return [s.response_tokens for s in samples]

    first = once()
    assert once() == first and len({tuple(t) for t in first}) > 1
    with pytest.raises(ValueError, match="4 samples but 1 seeds"):
        async def bad():
            async with RolloutClient(url) as client:
                await client.generate_batch([Sample(prompt="a")] * 4, Sampling(max_new_tokens=1), seeds=[1])
        run(bad())


def test_abort_all_then_continue_a_partial_rollout(url):
    """slime's partial rollout: abort in-flight requests (partial responses kept, status ABORTED),
    later continue them from prompt + partial response with the remaining budget."""
    samples = [Sample(prompt="", prompt_tokens=[3, 4]) for _ in range(2)]
    sampling = Sampling(max_new_tokens=2000, ignore_eos=True)  # long enough to be aborted mid-way

    async def first_round():
        async with RolloutClient(url) as client:
            task = asyncio.ensure_future(client.generate_batch(samples, sampling))
            while True:  # both running, a few tokens each (prompts are 2 tokens)
                load = (await asyncio.to_thread(requests.get, f"{url}/get_load", timeout=10)).json()[0]
                if load["num_reqs"] == 2 and load["num_tokens"] >= 2 * 2 + 10:
                    break
                await asyncio.sleep(0.01)
            await client.abort_all([url])
            await task

    run(first_round())
    assert all(s.status is Status.ABORTED for s in samples)
    partial = [list(s.response_tokens) for s in samples]
    assert all(0 < len(p) < 2000 for p in partial)

    async def second_round():
        async with RolloutClient(url) as client:
            await client.generate_batch(samples, Sampling(max_new_tokens=len(partial[0]) + 5))

    run(second_round())
    s = samples[0]
    assert s.response_tokens[:len(partial[0])] == partial[0]
    assert len(s.response_tokens) == len(s.rollout_logprobs) == len(s.loss_mask) <= len(partial[0]) + 5
    assert s.status in (Status.COMPLETED, Status.TRUNCATED)


def test_continuing_needs_prompt_tokens(url):
    s = Sample(prompt="the cat", response_tokens=[4], status=Status.ABORTED)

    async def go():
        async with RolloutClient(url) as client:
            await client.generate_batch([s], Sampling(max_new_tokens=3))

    with pytest.raises(RolloutError, match="prompt_tokens"):
        run(go())


def test_retry_window_is_derived_from_the_engine_health_checks_and_validated():
    from rlrun.config import ConfigError, load

    # 2 polls x (0.5 s interval + 10 s alive() + 5 s /health) + router list 10 s + DELETE 10 s + wait 30 s
    assert load([]).rollout.retry_window_s == 2 * (0.5 + 10 + 5) + 10 + 10 + 30 == 81.0
    assert load(["rollout.retry_window_s=5"]).rollout.retry_window_s == 5.0
    with pytest.raises(ConfigError, match="rollout.retry_window_s"):
        load(["rollout.retry_window_s=0"])


def test_a_groups_samples_go_as_one_batched_request_where_the_engine_ignores_seeds(url):
    """seeded=False (EngineKind.seeded: SGLang without deterministic inference samples without the seed): no seed is
    sent, a group's samples are one request in SGLang's list form, each caller gets its own sample, and other prompts
    go in their own batches; seeded=True (the hf engine): each sample goes alone with its seed."""
    prompts = [[3, 4], [5, 6, 7], [8]]

    def samples():
        return [Sample(prompt="", prompt_tokens=list(p), group_id=g) for g, p in enumerate(prompts) for _ in range(4)]

    async def go(seeded: bool):
        got = samples()
        async with RolloutClient(url, max_concurrency=64, seeded=seeded) as client:
            await client.generate_batch(got, Sampling(max_new_tokens=6), seeds=list(range(100, 112)))
            return got, client.batches

    def served():
        return requests.get(f"{url}/server_info", timeout=5).json()["num_requests"]

    before = served()
    batched, n_batches = run(go(seeded=False))
    middle = served()
    single, n_single = run(go(seeded=True))
    assert (n_batches, n_single) == (3, 0) and middle - before == 12 and served() - middle == 12
    for group in (batched[:4], batched[4:8], batched[8:]):
        assert len({tuple(s.response_tokens) for s in group}) > 1  # each row sampled on its own
        assert all(1 <= len(s.response_tokens) == len(s.rollout_logprobs) <= 6 for s in group)
    again, _ = run(go(seeded=True))
    assert [s.response_tokens for s in again] == [s.response_tokens for s in single]  # seeds kept where they count


def test_a_failed_batch_fails_each_of_its_callers(url):
    async def go():
        async with RolloutClient(url, max_retries=0, seeded=False) as client:
            bad = Sampling(max_new_tokens=-1)  # the engine answers 400 for the whole batch
            return await asyncio.gather(*(client.generate(input_ids=[3, 4], sampling=bad, seed=i) for i in range(3)),
                                        return_exceptions=True), client.batches

    errors, batches = run(go())
    assert batches == 1 and all(isinstance(e, RolloutError) and "rejected" in str(e) for e in errors)


def test_concurrency_slots_count_samples_and_a_batch_takes_its_slots_at_once():
    from rlrun.rollout.client import _Slots

    async def go():
        slots, order = _Slots(3), []

        async def hold(name: str, k: int, s: float):
            got = await slots.acquire(k)
            order.append((name, "in", slots.free))
            await asyncio.sleep(s)
            order.append((name, "out"))
            slots.release(got)

        # a takes 2 of 3; b (2) must wait for a; c (5) is capped at the 3 slots there are and waits for both
        await asyncio.gather(hold("a", 2, 0.05), hold("b", 2, 0.01), hold("c", 5, 0.01))
        return order, slots.free

    order, free = run(go())
    assert order == [("a", "in", 1), ("a", "out"), ("b", "in", 1), ("b", "out"), ("c", "in", 0), ("c", "out")]
    assert free == 3

    async def cancelled():  # a waiter cancelled before its turn leaves the queue; one granted and cancelled gives back
        slots = _Slots(2)
        await slots.acquire(2)
        waiter = asyncio.ensure_future(slots.acquire(1))
        await asyncio.sleep(0)
        waiter.cancel()
        granted = asyncio.ensure_future(slots.acquire(2))
        await asyncio.sleep(0)
        slots.release(2)  # the cancelled waiter is skipped: the next one gets both
        granted.cancel()  # granted, cancelled before it ran
        await asyncio.gather(waiter, granted, return_exceptions=True)
        return slots.free

    assert run(cancelled()) == 2


def test_the_client_sends_seeds_only_to_engines_that_sample_with_them():
    """EngineKind.seeded: the hf engine samples each request with its sampling_seed; SGLang 0.5.16 only under
    enable_deterministic_inference (sampling_batch_info.py), so an SGLang rollout sends none and batches its groups."""
    from rlrun.config import load
    from rlrun.config.kinds import ENGINES

    assert ENGINES["hf"].seeded({}) is True
    assert ENGINES["sglang"].seeded({}) is False and ENGINES["sglang"].seeded({"enable_deterministic_inference": True})
    cases = {(): True, ("hardware=h100", "rollout.engine=sglang"): False,
             ("hardware=h100", "rollout.engine=sglang", "+rollout.sglang.enable_deterministic_inference=true"): True}
    for overrides, seeded in cases.items():
        client = RolloutClient.from_config("http://x", load(list(overrides)).rollout)
        assert client.seeded is seeded, overrides
