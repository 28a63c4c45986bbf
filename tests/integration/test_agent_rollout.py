"""Multi-turn rollouts through the real sglang-router to real hf engines (token in / token out).

The trained ids (prompt_tokens + response_tokens) must be exactly the ids the engine generated and the
observation ids rlrun inserted, in order, with the loss mask 1 on the former and 0 on the latter; checked
with the toy tokenizer of the tiny model and with a Qwen3-style byte-level BPE built offline."""
import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlrun.agent import Environment, Step, ToolCall, observation_ids
from rlrun.agent.resolve import load_generate_fn
from rlrun.data.sample import Sample, Status
from rlrun.rollout.client import RolloutClient, Sampling
from rlrun.rollout.handle import ClientHandle, PolicyVersion
from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer
from rlrun.rollout.engines.sglang.router.router import Router
from rlrun.rollout.tiny_model import build_model

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from qwen3_offline import build_qwen3_tokenizer  # noqa: E402


def toy_tokenizer():
    from rlrun.data.toy import build_toy_tokenizer

    return build_toy_tokenizer()


def serve(tokenizer, tmp_path):
    model = build_model(seed=0, vocab_size=len(tokenizer))
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    engine = HFEngine(model, tokenizer, seed=5)
    srv = ThreadedServer(engine)
    srv.start()
    router = Router(worker_urls=[srv.url], log_dir=tmp_path).start()
    return engine, srv, router


@pytest.fixture(scope="module", params=["toy", "qwen3"])
def stack(request, tmp_path_factory):
    tok = toy_tokenizer() if request.param == "toy" else build_qwen3_tokenizer()
    engine, srv, router = serve(tok, tmp_path_factory.mktemp("router"))
    yield SimpleNamespace(tok=tok, url=router.url, name=request.param)
    router.stop()
    srv.stop()
    engine.shutdown()


class Recording(ClientHandle):
    """The runner's handle, recording what each request sent and got (the test's view of the engine)."""

    async def generate(self, input_ids, sampling, *, seed=None):
        out = await super().generate(input_ids, sampling, seed=seed)
        self.record.append((list(input_ids), list(out.token_ids)))
        return out


def run_episode(stack, fn, prompt_ids, *, max_turns=3, max_response_len=64, context_length=512, n=3, **kw):
    sampling = Sampling(max_new_tokens=kw.pop("max_new_tokens", 6), temperature=1.0)
    metrics, calls = {}, []

    async def go():
        async with RolloutClient(stack.url) as client:
            samples = [Sample(prompt="p", prompt_tokens=list(prompt_ids)) for _ in range(n)]
            for i, s in enumerate(samples):
                h = Recording(client, tokenizer=stack.tok, context_length=context_length,
                              max_response_len=max_response_len, versions=PolicyVersion(), partial=False,
                              seed=100 + i, max_turns=max_turns, tool_timeout_s=kw.get("timeout", 5.0),
                              metrics=metrics)
                h.record = calls
                await fn(h, s, sampling)
            return samples, SimpleNamespace(calls=calls, metrics=metrics)

    return asyncio.run(go())


class ChatEnv(Environment):
    """Answers every turn with a tool message (a tool call of the fixed tool 'clock')."""

    tools = {"clock": lambda: "12:00"}

    async def step(self, turn, tools):
        results = await tools.run([ToolCall("clock")])
        return Step([{"role": "tool", "content": results[0].content}], tool_results=results)


def prompt_ids(tok):
    return tok.apply_chat_template([{"role": "user", "content": "the time?"}], add_generation_prompt=True,
                                   tokenize=True, return_dict=False)


def test_trained_ids_are_the_generated_and_inserted_ids(stack):
    fn = load_generate_fn  # noqa: F841  (resolution of a class is tested below)
    from rlrun.agent import env_generate

    prompt = prompt_ids(stack.tok)
    samples, h = run_episode(stack, env_generate(ChatEnv), prompt, max_response_len=200)
    calls = iter(h.calls)
    for s in samples:
        assert s.status is Status.TRUNCATED and s.metadata["truncated_by"] == "max_turns"
        model_turns = [t for t in s.metadata["turns"] if t["role"] == "assistant"]
        assert len(model_turns) == 3
        rebuilt, mask = list(prompt), []
        for t in s.metadata["turns"]:
            seg = s.response_tokens[t["token_start"]:t["token_end"]]
            if t["role"] == "assistant":
                sent, got = next(calls)
                assert sent == rebuilt  # the engine saw exactly the ids that are trained on
                assert seg == got
                mask += [1] * len(seg)
                after_eos = bool(got) and got[-1] == stack.tok.eos_token_id
            else:
                want = observation_ids(stack.tok, [{"role": "tool", "content": "12:00"}], after_eos=after_eos)
                assert seg == want
                mask += [0] * len(seg)
            rebuilt += seg
        assert list(s.prompt_tokens) + list(s.response_tokens) == rebuilt
        assert s.loss_mask == mask and len(s.rollout_logprobs) == len(mask)
        assert all(lp == 0.0 for lp, m in zip(s.rollout_logprobs, mask) if not m)
        assert all(lp < 0.0 for lp, m in zip(s.rollout_logprobs, mask) if m)
        assert s.token_versions == [None] * len(mask)  # the engine's initial weights, and inserted tokens


def test_qwen3_observation_is_the_template_text_between_turns():
    tok = build_qwen3_tokenizer()
    obs = [{"role": "tool", "content": "12:00"}, {"role": "tool", "content": "13:00"}]
    want = ("\n<|im_start|>user\n<tool_response>\n12:00\n</tool_response>\n<tool_response>\n13:00\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(observation_ids(tok, obs, after_eos=True)) == want
    assert tok.decode(observation_ids(tok, obs, after_eos=False)) == "<|im_end|>" + want
    # the added tokens are single ids, not spelled out in bytes
    ids = observation_ids(tok, obs, after_eos=True)
    assert tok.convert_tokens_to_ids("<tool_response>") in ids and tok.convert_tokens_to_ids("<|im_start|>") in ids


def test_context_and_response_budgets_truncate(stack):
    from rlrun.agent import env_generate

    prompt = prompt_ids(stack.tok)
    ctx = len(prompt) + 5
    samples, h = run_episode(stack, env_generate(ChatEnv), prompt, context_length=ctx, max_new_tokens=8, n=2)
    for s in samples:
        assert s.status is Status.TRUNCATED and s.metadata["truncated_by"] == "context_length"
        assert len(s.prompt_tokens) + len(s.response_tokens) <= ctx
    assert all(len(sent) + len(got) <= ctx for sent, got in h.calls)
    samples, _ = run_episode(stack, env_generate(ChatEnv), prompt, max_response_len=4, max_new_tokens=8, n=2)
    for s in samples:
        assert s.status is Status.TRUNCATED and s.metadata["truncated_by"] == "max_response_len"
        assert len(s.response_tokens) <= 4


class FlakyEnv(ChatEnv):
    tools = {"clock": lambda: (_ for _ in ()).throw(OSError("no clock")), "slow": lambda: __import__("time").sleep(2)}

    async def step(self, turn, tools):
        results = await tools.run([ToolCall("clock"), ToolCall("slow")])
        return Step([{"role": "tool", "content": r.content} for r in results], tool_results=results)


def test_tool_errors_and_timeouts_are_counted_and_the_episode_goes_on(stack):
    from rlrun.agent import env_generate

    samples, h = run_episode(stack, env_generate(FlakyEnv), prompt_ids(stack.tok), max_turns=2, n=2, timeout=0.3,
                              max_response_len=400, context_length=1024)
    # 2 samples x 2 turns x 2 calls (the environment steps after the last turn too: it may end there)
    assert h.metrics["rollout/tool_calls"] == 8 and h.metrics["rollout/tool_errors"] == 4
    assert h.metrics["rollout/tool_timeouts"] == 4 and h.metrics["rollout/turns"] == 4
    for s in samples:
        first = s.metadata["turns"][0]
        assert "OSError: no clock" in first["error"] and "timeout" in first["error"]
        assert sum(t["role"] == "assistant" for t in s.metadata["turns"]) == 2


SLIME_FN = '''
import aiohttp

async def generate(args, sample, sampling_params):
    """slime's custom-generate form: POST token ids to the router, append with the Sample's helpers."""
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    prompt_len = len(sample.tokens)
    async with aiohttp.ClientSession() as session:
        for turn in range(args.max_turns):
            payload = {"input_ids": sample.tokens, "sampling_params": sampling_params, "return_logprob": True}
            async with session.post(url, json=payload) as resp:
                out = await resp.json()
            pairs = out["meta_info"]["output_token_logprobs"]
            sample.append_response_tokens(args, tokens=[t for _, t, _ in pairs], log_probs=[lp for lp, _, _ in pairs],
                                          trainable=True, meta_info=out["meta_info"])
            sample.response += out["text"]
            if turn + 1 < args.max_turns:
                sample.append_response_tokens(args, tokens=[7, 8], trainable=False)  # a tool's two tokens
    sample.status = sample.Status.TRUNCATED
    sample.reward = {"score": 0.5}
    return sample
'''


def test_a_slime_generate_function_runs_through_the_adapter(stack, tmp_path):
    path = tmp_path / "slime_gen.py"
    path.write_text(SLIME_FN)
    fn = load_generate_fn(f"slime:{path}:generate")
    prompt = prompt_ids(stack.tok)
    samples, _ = run_episode(stack, fn, prompt, max_turns=2, n=2, max_new_tokens=3)
    for s in samples:
        assert s.prompt_tokens == prompt and s.status is Status.TRUNCATED and s.reward == 0.5
        k = s.loss_mask.index(0)
        assert s.response_tokens[k:k + 2] == [7, 8] and s.loss_mask[k:k + 2] == [0, 0]
        assert sum(s.loss_mask) == len(s.response_tokens) - 2 and 1 <= sum(s.loss_mask) <= 6
        assert len(s.rollout_logprobs) == len(s.response_tokens)
        assert s.token_versions == [None] * len(s.response_tokens)  # "default": the initial weights
