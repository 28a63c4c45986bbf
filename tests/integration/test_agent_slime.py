"""slime-style generate functions run through rlrun's runner path (generate_samples -> the slime adapter
-> slime's post() -> the real sglang-router -> a real hf engine serving the tiny model), unchanged.

The functions in slime_style_fns.py make the calls slime's examples make. Every trained id is checked
against what the engine generated or the tokenizer inserted, every loss-mask entry, every log-prob
against one full forward of the served model, and the status against the finish reason.
With RLRUN_SLIME_DIR pointing at a slime checkout, slime's own search-r1, retool and multi-agent
functions run the same way (test_slime_examples_*)."""
import asyncio
import os
import sys
from pathlib import Path

import pytest
import torch

from rlrun.agent import slime_compat
from rlrun.agent.resolve import load_generate_fn
from rlrun.config import load
from rlrun.data.sample import Sample, Status
from rlrun.rollout.client import Sampling
from rlrun.rollout.handle import PolicyVersion, generate_samples

SLIME_DIR = os.environ.get("RLRUN_SLIME_DIR")  # a slime checkout (tests/conftest.py puts it on sys.path)
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "unit"))
from qwen3_offline import build_qwen3_tokenizer  # noqa: E402
from slime_style_fns import OBSERVATION  # noqa: E402
from test_agent_rollout import serve  # noqa: E402

# float32 both ways; the engine decodes with a KV cache (and may batch requests), the check runs one
# forward over the whole sequence: the summation order differs; measured max |diff| 9.5e-7 over all
# the checks of this file with slime on the path (2026-11-25).
LOGPROB_TOL = 1e-4
MAX_NEW = 5


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tok = build_qwen3_tokenizer()
    model_dir = tmp_path_factory.mktemp("model")
    tok.save_pretrained(model_dir)  # GenerateState(args) loads the tokenizer of args.hf_checkpoint
    engine, srv, router = serve(tok, tmp_path_factory.mktemp("router"))
    yield engine, router, tok, str(model_dir)
    router.stop()
    srv.stop()
    engine.shutdown()
    if hasattr(slime_compat.GenerateState, "clear_instances"):
        slime_compat.GenerateState.clear_instances()


def run(stack, spec, prompts, *, stop_token_ids=(), label="x", **overrides):
    engine, router, tok, model_dir = stack
    cfg = load([f"rollout.generate_fn={spec}", f"rollout.max_response_len={overrides.pop('max_response_len', 64)}",
                "rollout.temperature=1.0", *[f"{k}={v}" for k, v in overrides.items()]])
    fn = load_generate_fn(spec, cfg)
    samples = [Sample(prompt=p, prompt_tokens=tok(p, add_special_tokens=False)["input_ids"], label=label, group_id=i)
               for i, p in enumerate(prompts)]
    sampling = Sampling(max_new_tokens=MAX_NEW, temperature=1.0, stop_token_ids=tuple(stop_token_ids))
    out, _ = generate_samples(router.url, cfg.rollout, samples, sampling, [11 + i for i in range(len(samples))],
                              fn=fn, tokenizer=tok, versions=PolicyVersion(), partial=False, model_path=model_dir)
    return out


def forward_logprobs(engine, prefix: list[int], new: list[int]) -> list[float]:
    """log p(new[j] | prefix + new[:j]) under the served model, one forward."""
    ids = torch.tensor([list(prefix) + list(new)])
    with torch.no_grad():
        logits = engine.model(ids).logits[0].float()
    lp = torch.log_softmax(logits[len(prefix) - 1:-1], dim=-1)
    return lp[torch.arange(len(new)), torch.tensor(new)].tolist()


def check_segment(engine, s: Sample, start: int, end: int, prefix: list[int] | None = None):
    """Response tokens [start, end) are one model turn: mask 1 and the engine's log-probs."""
    prefix = list(s.prompt_tokens) + list(s.response_tokens[:start]) if prefix is None else prefix
    want = forward_logprobs(engine, prefix, s.response_tokens[start:end])
    assert s.loss_mask[start:end] == [1] * (end - start)
    assert s.rollout_logprobs[start:end] == pytest.approx(want, abs=LOGPROB_TOL)


def status_of(n_last_turn: int, max_new: int) -> Status:
    return Status.TRUNCATED if n_last_turn == max_new else Status.COMPLETED


PROMPTS = ["search for the capital of france", "call the tool with the query"]


def test_token_turns_with_append_response_tokens(stack):
    engine, _, tok, _ = stack
    obs = tok(OBSERVATION, add_special_tokens=False)["input_ids"]
    out = run(stack, "slime:slime_style_fns:tool_loop", PROMPTS)
    assert len(out) == 2
    for p, s in zip(PROMPTS, out):
        assert s.prompt_tokens == tok(p, add_special_tokens=False)["input_ids"]
        k = s.loss_mask.index(0)  # the first model turn has 1..4 tokens, then the observation
        assert 1 <= k <= 4 and s.response_tokens[k:k + len(obs)] == obs and s.loss_mask[k:k + len(obs)] == [0] * len(obs)
        assert s.rollout_logprobs[k:k + len(obs)] == [0.0] * len(obs)
        check_segment(engine, s, 0, k)
        check_segment(engine, s, k + len(obs), len(s.response_tokens))
        n2 = len(s.response_tokens) - k - len(obs)
        assert 1 <= n2 <= 4 and s.status is status_of(n2, 4)
        assert s.response == tok.decode(s.response_tokens[:k]) + OBSERVATION + tok.decode(s.response_tokens[k + len(obs):])
        assert s.token_versions == [None] * len(s.response_tokens)  # the engines' initial weights


def test_text_turns_with_hand_extended_lists(stack):
    engine, _, tok, _ = stack
    obs = tok(OBSERVATION, add_special_tokens=False)["input_ids"]
    out = run(stack, "slime:slime_style_fns:text_turns", PROMPTS)
    for p, s in zip(PROMPTS, out):
        assert s.prompt_tokens == tok(p, add_special_tokens=False)["input_ids"]
        k = s.loss_mask.index(0)
        assert s.response_tokens[k:k + len(obs)] == obs and sum(s.loss_mask) == len(s.response_tokens) - len(obs)
        check_segment(engine, s, 0, k)
        # turn 2 was sent as text: the engine saw the tokenisation of prompt + turn 1's text + observation
        text1 = s.response.split(OBSERVATION)[0]
        seen = tok(p + text1 + OBSERVATION)["input_ids"]
        check_segment(engine, s, k + len(obs), len(s.response_tokens), prefix=seen)
        assert s.status is status_of(len(s.response_tokens) - k - len(obs), MAX_NEW)


def test_a_list_of_samples_comes_back_as_samples_of_the_group(stack):
    engine, _, tok, _ = stack
    out = run(stack, "slime:slime_style_fns:agents", PROMPTS, max_response_len=20)
    assert [s.group_id for s in out] == [0, 0, 0, 1, 1, 1]
    for i, s in enumerate(out):
        prompt = f"{PROMPTS[i // 3]} agent {i % 3}"
        assert s.prompt == prompt and s.prompt_tokens == tok(prompt, add_special_tokens=False)["input_ids"]
        assert 1 <= len(s.response_tokens) <= MAX_NEW and s.label == "x"
        check_segment(engine, s, 0, len(s.response_tokens))
        assert s.status is status_of(len(s.response_tokens), MAX_NEW)
        assert s.reward == len(s.response_tokens) / 20  # slime_style_fns.reward, args.rollout_max_response_len=20


def test_a_slime_reward_function_scores_what_the_generate_function_made(stack):
    """data.rm_type=slime:<path>: called right after the generate function (slime's generate_and_rm),
    per Sample, or once with the list of a fan-out (slime's batched --custom-rm-path form)."""
    gen = "slime:slime_style_fns:tool_loop"
    out = run(stack, gen, PROMPTS, max_response_len=50, **{"data.rm_type": "slime:slime_style_fns:reward"})
    assert [s.reward for s in out] == [len(s.response_tokens) / 50 for s in out]
    out = run(stack, "slime:slime_style_fns:pair", PROMPTS, **{"data.rm_type": "slime:slime_style_fns:batch_reward"})
    assert [s.reward for s in out] == [0.0, 1.0, 0.0, 1.0] and [s.group_id for s in out] == [0, 0, 1, 1]


# ---------------------------------------------------------------- slime's own examples (RLRUN_SLIME_DIR)
needs_slime = pytest.mark.skipif(not SLIME_DIR, reason="RLRUN_SLIME_DIR (a slime checkout) is not set")


@needs_slime
def test_slime_on_the_path_is_what_the_functions_get():
    from slime.rollout.sglang_rollout import GenerateState
    from slime.utils.types import Sample as SlimeSample

    assert slime_compat.SOURCE == "slime", slime_compat.IMPORT_ERRORS
    assert slime_compat.Sample is SlimeSample and slime_compat.GenerateState is GenerateState


def every_token_stops(stack) -> dict:
    """stop_token_ids = the whole vocabulary: every model turn is exactly one token, finish "stop"
    (so slime's functions go through their tool/observation branch whatever the tiny model samples)."""
    return {"stop_token_ids": tuple(range(len(stack[2])))}


def user_module(path: str):
    """The module rlrun loaded for `path` (rlrun.rollout.generate_api.load_object's name for it)."""
    return sys.modules[f"rlrun_user_{Path(path).stem}"]


def check_one_token_turns(engine, s: Sample, obs: list[int], turns: int):
    """The response is `turns` x (one model token, then `obs`) sent token in / token out; the last
    observation may be missing (the function stopped after the model's turn)."""
    pos = 0
    for t in range(turns):
        check_segment(engine, s, pos, pos + 1)
        pos += 1
        rest = s.response_tokens[pos:pos + len(obs)]
        if t == turns - 1 and not rest:
            break
        assert rest == obs and s.loss_mask[pos:pos + len(obs)] == [0] * len(obs)
        assert s.rollout_logprobs[pos:pos + len(obs)] == [0.0] * len(obs)
        pos += len(obs)
    assert pos == len(s.response_tokens)


@needs_slime
def test_slime_examples_search_r1(stack):
    """slime's Search-R1 function (and its reward function): text in, one model token per turn (every token stops), each turn
    followed by the "invalid action" observation (SEARCH_R1_CONFIGS["max_turns"] = 2)."""
    engine, _, tok, _ = stack
    path = f"{SLIME_DIR}/examples/search-r1/generate_with_search.py"
    out = run(stack, f"slime:{path}:generate", PROMPTS, **every_token_stops(stack),
              **{"data.rm_type": f"slime:{path}:reward_func"}, label={"ground_truth": {"target": ["paris"]}})
    mod = user_module(path)
    assert mod.SEARCH_R1_CONFIGS["max_turns"] == 2
    assert [s.reward for s in out] == [0.0, 0.0]  # reward_func ran: no <answer>, not Search-R1's format: 0
    for p, s in zip(PROMPTS, out):
        prompt_ids = tok(p, add_special_tokens=False)["input_ids"]
        assert s.prompt_tokens == prompt_ids and s.status is Status.COMPLETED
        text1 = tok.decode(s.response_tokens[:1])
        next_obs, done = asyncio.run(mod.execute_predictions(text1))
        obs = tok(next_obs, add_special_tokens=False)["input_ids"]
        # each turn's answer is followed by its observation, the last one's too (the loop appends it
        # before checking the turn count); both answers are "invalid actions": the same observation
        n = len(obs)
        assert not done and s.response_tokens[1:1 + n] == obs == s.response_tokens[2 + n:]
        assert s.loss_mask == [1] + [0] * n + [1] + [0] * n
        assert s.rollout_logprobs[1:1 + n] == [0.0] * n == s.rollout_logprobs[2 + n:]
        text2 = tok.decode(s.response_tokens[1 + n:2 + n])
        assert s.response == text1 + next_obs + text2 + next_obs
        check_segment(engine, s, 0, 1)
        check_segment(engine, s, 1 + n, 2 + n, prefix=tok(p + text1 + next_obs)["input_ids"])  # sent as text


@needs_slime
def test_slime_examples_retool(stack):  # and its reward function
    """slime's ReTool function: its own chat template around the prompt, token in / token out, one
    model token per turn (every token stops) and the "invalid action" observation after it, until
    the observation overflows args.rollout_max_context_len (rollout.context_length): trimmed, TRUNCATED."""
    engine, _, tok, _ = stack
    path = f"{SLIME_DIR}/examples/retool/generate_with_retool.py"
    ctx = 1200
    (s,) = run(stack, f"slime:{path}:generate", PROMPTS[:1], **every_token_stops(stack),
               **{"rollout.context_length": ctx, "data.rm_type": f"slime:{path}:reward_func"})
    mod = user_module(path)
    prompt = mod.format_conversation_with_tools(prompt=PROMPTS[0], tools=mod.tool_registry.get_tool_specs())
    assert s.prompt_tokens == tok(prompt, add_special_tokens=False)["input_ids"]
    pos, mask = 0, []
    while pos < len(s.response_tokens):  # each turn: one model token, then its observation (trimmed at ctx)
        check_segment(engine, s, pos, pos + 1)
        next_obs, done = asyncio.run(mod.execute_predictions(tok.decode(s.response_tokens[pos:pos + 1])))
        assert not done
        obs = tok(next_obs, add_special_tokens=False)["input_ids"]
        obs = obs[:ctx - len(s.prompt_tokens) - pos - 1]
        assert s.response_tokens[pos + 1:pos + 1 + len(obs)] == obs
        mask += [1] + [0] * len(obs)
        pos += 1 + len(obs)
    assert s.loss_mask == mask and len(s.prompt_tokens) + len(s.response_tokens) == ctx
    assert s.status is Status.TRUNCATED and 1 < sum(mask) < mod.TOOL_CONFIGS["max_turns"]
    assert s.rollout_logprobs == [lp if m else 0.0 for lp, m in zip(s.rollout_logprobs, mask)]
    # reward_func: math_dapo's -1.0 for a wrong answer, plus (tool_call_count - 2) / 2 * 0.1 with the
    # tool_call_count=0 the generate function set on the sample, capped at -0.6
    assert s.reward == pytest.approx(-1.1, abs=1e-12)  # float arithmetic of -1.0 + -0.1


@needs_slime
def test_slime_examples_multi_agent(stack):
    """slime's multi-agent function: five solver agents, each its own Sample (a list comes back),
    scored by slime's rm_hub (rm_type math) and weighted by incorrect_reward_weight."""
    engine, _, tok, _ = stack
    spec = "slime:examples.multi_agent.rollout_with_multi_agents:generate_with_multi_agents"
    out = run(stack, spec, PROMPTS[:1], **every_token_stops(stack), **{"data.rm_type": "math"})
    from examples.multi_agent.prompts import SOLVER_PROMPT_TEMPLATE
    from examples.multi_agent.rollout_with_multi_agents import MULTI_AGENT_CONFIGS

    prompt = SOLVER_PROMPT_TEMPLATE.format(problem_statement=PROMPTS[0])
    assert len(out) == MULTI_AGENT_CONFIGS["num_parallel"] == 5
    for s in out:
        assert s.prompt == prompt and s.prompt_tokens == tok(prompt, add_special_tokens=False)["input_ids"]
        assert len(s.response_tokens) == 1 and s.loss_mask == [1] and s.status is Status.COMPLETED
        check_segment(engine, s, 0, 1)
        assert s.group_id == 0 and s.reward == 0.0  # "x" is not the answer: 0 x incorrect_reward_weight


# ---------------------------------------------------------------- slime's rollout functions (rollout.rollout_fn)
def run_rollout_fn(stack, spec, tmp_path, **overrides):
    """rlrun's rollout side with rollout.rollout_fn: SlimeRolloutFn over rlrun's prompt data (2 prompts x 2)."""
    from rlrun.agent.slime_rollout import SlimeRolloutFn
    from rlrun.parts import sampling as steps

    engine, router, tok, model_dir = stack
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(f'{{"input": "{p}", "label": "x"}}\n' for p in PROMPTS + ["a third prompt here"]))
    cfg = load([f"rollout.rollout_fn={spec}", f"data.prompt_data={data}", "data.shuffle=false",
                "rollout.rollout_batch_size=2", "rollout.n_samples_per_prompt=2", "rollout.max_response_len=20",
                "rollout.temperature=1.0", "algo.normalize_std=false", *[f"{k}={v}" for k, v in overrides.items()]])
    prompts = steps.load_prompts(cfg, tok, tmp_path)
    fn = SlimeRolloutFn(spec, cfg, prompts, router.url, model_dir)
    return fn, fn(0)


def test_a_slime_rollout_function_makes_the_rollout(stack, tmp_path):
    """rollout.rollout_fn=slime:<path>: slime's (args, rollout_id, data_buffer) -> list[list[Sample]], with the
    data buffer's requeue (add_samples) and the groups it hands out again first."""
    engine, _, tok, _ = stack
    fn, out = run_rollout_fn(stack, "slime:slime_style_fns:rollout", tmp_path,
                             **{"data.rm_type": "slime:slime_style_fns:reward"})
    # groups: prompt 0, then prompt 1 handed back and drawn again, each 2 samples; prompt 2 never drawn
    assert [s.group_id for s in out] == [0, 0, 1, 1]
    assert [s.prompt for s in out] == [PROMPTS[0]] * 2 + [PROMPTS[1]] * 2
    assert fn.buffer.get_buffer_length() == 0 and fn.buffer.groups == 2
    obs = tok(OBSERVATION, add_special_tokens=False)["input_ids"]
    for s in out:
        assert s.prompt_tokens == tok(s.prompt, add_special_tokens=False)["input_ids"] and s.label == "x"
        k = s.loss_mask.index(0)
        assert s.response_tokens[k:k + len(obs)] == obs
        check_segment(engine, s, 0, k)
        assert s.reward == len(s.response_tokens) / 20  # slime_style_fns.reward with args.rollout_max_response_len


@needs_slime
def test_slime_fully_async_rollout_function(stack, tmp_path):
    """slime's own fully-async rollout (examples/fully_async: --rollout-function-path
    slime.rollout.fully_async_rollout.generate_rollout_fully_async): its background worker draws groups from the
    data buffer and runs slime's generate_and_rm_group (slime's default generate, slime's rm_hub) on them."""
    engine, _, tok, _ = stack
    fn, out = run_rollout_fn(stack, "slime:slime.rollout.fully_async_rollout:generate_rollout_fully_async", tmp_path,
                             **{"data.rm_type": "deepscaler"})
    assert len(out) == 4 and sorted({s.group_id for s in out}) == [0, 1]
    for s in out:
        assert s.prompt in PROMPTS + ["a third prompt here"] and s.reward in (0.0, 1.0)
        assert 1 <= len(s.response_tokens) <= 20 and s.loss_mask == [1] * len(s.response_tokens)
        check_segment(engine, s, 0, len(s.response_tokens), prefix=tok(s.prompt, add_special_tokens=False)["input_ids"])
