"""Partial rollouts and policy versions against a real hf engine process, directly and through the
real sglang-router: a weight push aborts the request in flight (/abort_request), the handle keeps
the tokens so far and continues under the new version, and each token records its version.
Also the async loop's pure parts: staleness, the off-policy mask, the producer's admission gate."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
import requests
from test_loop_offload import group  # noqa: F401 - the module's engine + router fixture

from rlrun.data import Sample
from rlrun.loops import steps
from rlrun.loops.async_loop import staleness
from rlrun.rollout.client import RolloutClient, Sampling
from rlrun.rollout.engines.group import _post
from rlrun.rollout.generate_api import single_turn
from rlrun.rollout.handle import ClientHandle, PolicyVersion

pytestmark = pytest.mark.timeout(120)
PROMPT = [3, 4]


def _push_when_generating(group, versions: PolicyVersion, new_version: int) -> threading.Thread:
    """Once the engine has generated >= 10 tokens: WeightSync.push_all's order with a version bump
    standing in for the weights (abort in flight, new version, requests released)."""
    url = group.urls[0]

    def push():
        deadline = time.monotonic() + 30
        while requests.get(f"{url}/get_load", timeout=10).json()[0]["num_tokens"] < len(PROMPT) + 10:
            assert time.monotonic() < deadline, "the request never started"
            time.sleep(0.005)
        with versions.pushing(new_version):
            group.abort_all()
            _post(url, "/update_weight_version", {"new_version": str(new_version), "abort_all_requests": False})

    thread = threading.Thread(target=push)
    thread.start()
    return thread


@pytest.mark.parametrize("via", ["engine", "router"])
def test_a_push_aborts_and_the_partial_rollout_continues_under_the_new_version(group, via):
    url = group.urls[0] if via == "engine" else group.router.url
    _post(group.urls[0], "/update_weight_version", {"new_version": "3", "abort_all_requests": False})
    versions = PolicyVersion(3)
    sampling = Sampling(max_new_tokens=1500, ignore_eos=True)  # long enough to be aborted mid-way
    sample = Sample(prompt="", prompt_tokens=list(PROMPT))

    async def run():
        async with RolloutClient(url) as client:
            handle = ClientHandle(client, tokenizer=None, context_length=2048, max_response_len=1500,
                                  versions=versions, partial=True, seed=7)
            pusher = _push_when_generating(group, versions, 4)
            out = await single_turn(handle, sample, sampling)
            await asyncio.to_thread(pusher.join)
            return out, handle.aborts

    out, aborts = asyncio.run(run())
    assert aborts == 1 and out.status.value == "truncated"  # the full budget, over two segments
    v = out.token_versions
    assert len(out.response_tokens) == len(v) == len(out.rollout_logprobs) == len(out.loss_mask) == 1500
    first = v.index(4)
    assert first >= 10 and v == [3] * first + [4] * (1500 - first) and out.weight_version == 4
    # slime's --mask-offpolicy-in-partial-rollout: the first segment is not trained on
    assert steps.offpolicy_mask(out) == [0] * first + [1] * (1500 - first)
    batch, removed = steps.to_train_batch([out], mask_offpolicy=True).fold_offpolicy_mask()
    assert batch.loss_mask[0].sum().item() == 1500 - first and removed is not None
    assert steps.to_train_batch([out]).loss_mask[0].sum().item() == 1500


def test_without_partial_rollout_an_aborted_request_ends_with_what_it_had(group):
    versions = PolicyVersion(None)
    _post(group.urls[0], "/update_weight_version", {"new_version": "default", "abort_all_requests": False})
    sample = Sample(prompt="", prompt_tokens=list(PROMPT))

    async def run():
        async with RolloutClient(group.router.url) as client:
            handle = ClientHandle(client, tokenizer=None, context_length=2048, max_response_len=1500,
                                  versions=versions, partial=False, seed=7)
            pusher = _push_when_generating(group, versions, 1)
            out = await single_turn(handle, sample, Sampling(max_new_tokens=1500, ignore_eos=True))
            await asyncio.to_thread(pusher.join)
            return out

    out = asyncio.run(run())
    assert out.status.value == "aborted" and 10 <= len(out.response_tokens) < 1500
    assert set(out.token_versions) == {None}  # the initial weights generated all of them


def test_a_request_that_straddles_a_push_gets_the_older_version():
    """Sent under version 2, answered by an engine at version 3 (an in-place pause let it finish
    under the new weights): its tokens are attributed to 2, the bound that cannot underestimate age."""

    class Client:
        async def generate(self, *, input_ids, sampling, seed):
            return {"output_ids": [5, 6], "text": "x y", "meta_info": {
                "weight_version": "3", "finish_reason": {"type": "stop"},
                "output_token_logprobs": [[-0.1, 5, None], [-0.2, 6, None]]}}

    handle = ClientHandle(Client(), tokenizer=None, context_length=64, max_response_len=8,
                          versions=PolicyVersion(2), partial=True, seed=1)
    out = asyncio.run(handle.generate([1, 2], Sampling(max_new_tokens=8)))
    assert out.versions == [2, 2] and out.weight_version == 3 and out.finish == "stop"


def _sample(versions, mask=None, group=0):
    return Sample(prompt="", response_tokens=[1] * len(versions), token_versions=list(versions),
                  loss_mask=mask, group_id=group)


def test_staleness_is_the_trainer_version_minus_the_oldest_trained_token():
    groups = [[_sample([3, 4]), _sample([5])], [_sample([None, 5], mask=[0, 1])], [_sample([5, 5])]]
    # 5-3 = 2; the masked None token (an inserted one) does not count: 5-5 = 0; 0
    assert staleness(groups, version=5) == [2, 0, 0]
    assert staleness([[_sample([None])]], version=2) == [2]  # initial weights = version 0


def test_the_producer_waits_for_the_version_its_staleness_bound_needs():
    versions, started = PolicyVersion(None), threading.Event()
    waiter = threading.Thread(target=lambda: (versions.wait_at_least(2), started.set()))
    waiter.start()
    versions.set(1)
    assert not started.wait(0.2)  # version 1 < 2: still waiting
    with versions.pushing(2):
        pass
    assert started.wait(5)
    waiter.join()
    with pytest.raises(RuntimeError, match="stopping"):
        versions.wait_at_least(9, check_stop=lambda: (_ for _ in ()).throw(RuntimeError("stopping")))
