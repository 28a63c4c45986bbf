"""Sampling semantics (SGLang's) and batched KV-cache generation on a tiny real Qwen3."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlrun.rollout.api import parse_sampling_params
from rlrun.rollout.generation import RunningBatch, Sequence, StopChecker, generate, sample_next
from rlrun.rollout.tiny_model import build_model, build_tokenizer


def seq(seed=0, **sampling):
    return Sequence("r", [3], parse_sampling_params(sampling), torch.Generator().manual_seed(seed))


LOGITS = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))


def test_logprob_is_of_the_temperature_scaled_unfiltered_distribution():
    # top_k=1 forces token 0, but the logprob stays log p(0) under softmax(logits/T) (SGLang semantics)
    tokens, lps = sample_next(LOGITS, [seq(temperature=1.0, top_k=1)])
    assert tokens == [0] and lps[0] == pytest.approx(math.log(0.5), abs=1e-6)
    # T = 2: p ∝ sqrt(p) -> sqrt(.5)/(sqrt(.5)+sqrt(.3)+sqrt(.2))
    tokens, lps = sample_next(LOGITS, [seq(temperature=2.0, top_k=1)])
    z = math.sqrt(0.5) + math.sqrt(0.3) + math.sqrt(0.2)
    assert lps[0] == pytest.approx(math.log(math.sqrt(0.5) / z), abs=1e-6)


def test_greedy_uses_raw_log_softmax():
    tokens, lps = sample_next(LOGITS, [seq(temperature=0.0)])
    assert tokens == [0] and lps[0] == pytest.approx(math.log(0.5), abs=1e-6)


def test_top_p_never_samples_outside_the_nucleus():
    # nucleus at top_p=0.7: {0 (0.5), 1 (0.3)} -> token 2 never appears; both others do
    seen = {sample_next(LOGITS, [seq(seed=s, top_p=0.7)])[0][0] for s in range(200)}
    assert seen == {0, 1}


def test_sampling_frequencies_follow_the_distribution():
    counts = torch.zeros(3)
    s = seq(seed=1)
    for _ in range(4000):
        counts[sample_next(LOGITS, [s])[0][0]] += 1
    assert torch.allclose(counts / 4000, torch.tensor([0.5, 0.3, 0.2]), atol=0.03)


@pytest.fixture(scope="module")
def tiny():
    return build_model(seed=0), build_tokenizer()


def _run(model, tok, seqs):
    stop = StopChecker(tok, {1}, model.config.max_position_embeddings)
    generate(model, seqs, stop, 0, run_step=lambda fn: fn(), between_steps=lambda active: None)
    return stop


def test_batched_left_padded_generation_equals_one_at_a_time(tiny):
    model, tok = tiny
    prompts = [[3, 5, 7, 9, 11], [4], [6, 8]]

    def make():
        return [Sequence(f"r{i}", p, parse_sampling_params({"max_new_tokens": 6, "temperature": 1.0}),
                         torch.Generator().manual_seed(i)) for i, p in enumerate(prompts)]

    batch = make()
    _run(model, tok, batch)
    for i, single in enumerate(make()):
        _run(model, tok, [single])
        assert single.output_ids == batch[i].output_ids
        assert single.logprobs == pytest.approx(batch[i].logprobs, abs=1e-5)


def test_engine_logprobs_equal_a_teacher_forced_forward(tiny):
    """What the trainer computes: log_softmax of one full forward over prompt + response."""
    model, tok = tiny
    seqs = [Sequence(f"r{i}", p, parse_sampling_params({"max_new_tokens": 8, "ignore_eos": True}),
                     torch.Generator().manual_seed(10 + i)) for i, p in enumerate([[3, 4, 5], [9]])]
    _run(model, tok, seqs)
    for s in seqs:
        full = torch.tensor([s.prompt_ids + s.output_ids])
        with torch.no_grad():
            lp = torch.log_softmax(model(full).logits[0].float(), -1)
        n = len(s.prompt_ids)
        expected = [lp[n - 1 + j, t].item() for j, t in enumerate(s.output_ids)]
        assert s.logprobs == pytest.approx(expected, abs=1e-5)


def test_stop_token_stop_string_and_length(tiny):
    model, tok = tiny
    params = {"max_new_tokens": 5, "ignore_eos": True}

    def make(rid, seed, **extra):  # same seed -> same samples until a stop cuts the sequence
        return Sequence(rid, [3, 5], parse_sampling_params({**params, **extra}), torch.Generator().manual_seed(seed))

    for seed in range(20):  # a seed whose first two sampled tokens differ
        base = make("a", seed)
        _run(model, tok, [base])
        first, second = base.output_ids[:2]
        if first != second:
            break
    assert first != second, "no seed with two distinct tokens: change the range"
    assert base.finish == {"type": "length", "length": 5}

    by_id = make("b", seed, stop_token_ids=[second])
    by_str = make("c", seed, stop=[tok.decode([second])])
    stop = _run(model, tok, [by_id, by_str])
    assert by_id.output_ids == [first, second] and by_id.finish == {"type": "stop", "matched": second}
    assert stop.output_text(by_id) == tok.decode([first])  # matched stop token trimmed from the text
    assert by_str.finish == {"type": "stop", "matched": tok.decode([second])}
    assert stop.output_text(by_str).strip() == tok.decode([first])


def test_max_new_tokens_zero_and_abort(tiny):
    model, tok = tiny
    zero = Sequence("z", [3], parse_sampling_params({"max_new_tokens": 0}), torch.Generator())
    victim = Sequence("v", [3], parse_sampling_params({"max_new_tokens": 50, "ignore_eos": True}), torch.Generator())
    stop = StopChecker(tok, {1}, 256)

    def between(active):
        for s in active:
            if len(s.output_ids) == 3:
                s.abort("test")

    generate(model, [zero, victim], stop, 0, run_step=lambda fn: fn(), between_steps=between)
    assert zero.finish == {"type": "length", "length": 0} and zero.output_ids == []
    assert victim.finish["type"] == "abort" and len(victim.output_ids) == 3


def test_requests_joining_a_running_batch_match_running_alone(tiny):
    """Continuous batching: rows admitted mid-way (longer and shorter prompts than the batch's
    width) and rows leaving early do not change anyone's samples or log-probs."""
    model, tok = tiny

    def make():
        return {
            "a": Sequence("a", [3, 4, 5], parse_sampling_params({"max_new_tokens": 12, "ignore_eos": True}),
                          torch.Generator().manual_seed(1)),
            "b": Sequence("b", list(range(3, 17)), parse_sampling_params({"max_new_tokens": 4, "ignore_eos": True}),
                          torch.Generator().manual_seed(2)),
            "c": Sequence("c", [7], parse_sampling_params({"max_new_tokens": 6, "ignore_eos": True}),
                          torch.Generator().manual_seed(3)),
        }

    stop = StopChecker(tok, {1}, model.config.max_position_embeddings)
    seqs = make()
    batch = RunningBatch(model, stop, 0, run_step=lambda fn: fn())
    batch.admit([seqs["a"]])
    for step in range(9):
        if step == 2:
            batch.admit([seqs["b"]])  # 14-token prompt: wider than the running batch
        if step == 7:
            batch.admit([seqs["c"]])  # 1-token prompt, after b has left (columns trimmed)
        batch.drop_finished()
        batch.step()
    while len(batch):
        batch.drop_finished()
        if len(batch):
            batch.step()
    for name, alone in make().items():
        _run(model, tok, [alone])
        assert seqs[name].output_ids == alone.output_ids, name
        assert seqs[name].logprobs == pytest.approx(alone.logprobs, abs=1e-5), name
        assert seqs[name].finish == alone.finish


_request = st.tuples(st.lists(st.integers(3, 38), min_size=1, max_size=9),  # prompt
                     st.integers(0, 7),                                     # max_new_tokens
                     st.integers(0, 6),                                     # decode step it arrives at
                     st.integers(0, 2**31))                                 # sampling seed


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_request, min_size=1, max_size=5))
def test_any_admission_schedule_equals_running_alone(tiny, requests_):
    """Property: whatever the prompts, lengths and arrival steps, continuous batching gives every
    request the tokens (and, within 1e-5, the log-probs) it gets alone."""
    model, tok = tiny

    def make(i, prompt, max_new, seed):
        return Sequence(f"r{i}", prompt, parse_sampling_params({"max_new_tokens": max_new, "ignore_eos": True}),
                        torch.Generator().manual_seed(seed))

    seqs = [make(i, p, m, s) for i, (p, m, _, s) in enumerate(requests_)]
    stop = StopChecker(tok, {1}, model.config.max_position_embeddings)
    batch = RunningBatch(model, stop, 0, run_step=lambda fn: fn())
    step = 0
    while step <= 6 or len(batch):
        arriving = [s for s, (_, _, at, _) in zip(seqs, requests_) if at == step]
        if arriving:
            batch.admit(arriving)
        batch.drop_finished()
        if len(batch):
            batch.step()
        step += 1
    for i, (p, m, _, s) in enumerate(requests_):
        alone = make(i, p, m, s)
        _run(model, tok, [alone])
        assert seqs[i].output_ids == alone.output_ids
        assert seqs[i].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
        assert seqs[i].finish == alone.finish
