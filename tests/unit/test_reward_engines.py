"""Reward engines (reward.model, docs/rewards.md "Reward engines"): the plan places them, validate refuses what cannot
work, and the judge scores samples through a real hf engine (SGLang's token_ids_logprob / a generated judgement),
with failures counted, not raised. The runner end (an hf reward engine judging the toy task) is
tests/integration/test_training_modes.py::test_a_reward_engine_judges_the_default_task."""
from __future__ import annotations

import math
import socket

import pytest
import requests
import torch

from rlrun.config import ConfigError, load
from rlrun.config.plan import make_plan
from rlrun.reward import score_batch
from rlrun.reward.judge import Judge, JudgeError, parse_score
from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer
from rlrun.rollout.tiny_model import build_tokenizer, save_tiny_model

ON = ["reward.model.checkpoint=/rm", "data.rm_type=reward_model"]


def test_the_plan_places_reward_engines_beside_or_apart_from_the_rollout_engines():
    beside = make_plan(load(ON + ["reward.model.num_engines=1"]))
    assert [(s.node, s.gpu, s.rank) for s in beside.placement if s.role == "reward"] == [(0, 0, 0)]
    assert (beside.reward_engines, beside.reward_gpus) == (1, 0)
    apart = make_plan(load(ON + ["reward.model.colocate=false", "reward.model.num_engines=2"]))
    # the trainer and the rollout engine share GPU 0; the reward engines take the next free ones
    assert [(s.node, s.gpu, s.rank) for s in apart.placement if s.role == "reward"] == [(0, 1, 0), (0, 2, 1)]
    assert (apart.reward_engines, apart.reward_gpus, apart.num_nodes) == (2, 2, 1)
    assert make_plan(load()).reward_engines == 0 and all(s.role != "reward" for s in make_plan(load()).placement)


@pytest.mark.parametrize("overrides,key", [
    (["data.rm_type=reward_model"], "data.rm_type"),                                   # no checkpoint
    (["reward.model.checkpoint=/rm"], "reward.model.checkpoint"),                      # nothing asks the judge
    (["reward.model.engine=hf"], "reward.model.engine"),                               # no checkpoint: ignored
    (ON + ["algo=sft", "data.toy_task=echo"], "reward.model.checkpoint"),              # no samples to judge
    (ON + ["reward.model.engine=sglang"], "reward.model.engine"),                      # a GPU engine on the CPU
    (ON + ["reward.model.gpus_per_engine=2"], "reward.model.gpus_per_engine"),         # the hf engine is one device
    (ON + ["reward.model.num_engines=2"], "reward.model.num_engines"),                 # 2 colocated, 1 engine GPU
    (ON + ["reward.model.colocate=false", "reward.model.num_engines=8"], "reward.model.num_engines"),  # 2 nodes
    (ON + ["reward.model.prompt_template={question}"], "reward.model.prompt_template"),
    (ON + ["reward.model.target={answer}"], "reward.model.target"),
    (ON + ["reward.model.mode=generative", "reward.model.parser=score"], "reward.model.parser"),
    (ON + ["reward.model.mode=generative", "reward.model.parser=(oops"], "reward.model.parser"),
])
def test_reward_engine_settings_that_cannot_work_are_refused(overrides, key):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    assert key in [p.path for p in e.value.problems]


def test_an_engine_kind_that_cannot_judge_and_a_colocated_static_pool_over_the_gpu_are_refused():
    from rlrun.config.kinds import ENGINES, EngineKind

    with ENGINES.registered(EngineKind("nojudge", needs_gpu=False, max_gpus_per_engine=1, start="x.y:z")):
        with pytest.raises(ConfigError) as e:
            load(ON + ["reward.model.engine=nojudge"])
        assert [p.fix for p in e.value.problems if p.path == "reward.model.engine"] == \
            ["set reward.model.engine=hf or sglang"]
    with pytest.raises(ConfigError) as e:  # sglang rollout engine 0.7 + reward engine 0.3 of each GPU
        load(ON + ["hardware=h100", "model=qwen3-0.6b", "checkpoint.random_init=true",
                   "reward.model.mem_fraction_static=0.3"])
    assert "reward.model.mem_fraction_static" in [p.path for p in e.value.problems]
    load(ON + ["hardware=h100", "model=qwen3-0.6b", "checkpoint.random_init=true"])  # 0.7 + 0.2 fits


def test_preflight_refuses_a_missing_checkpoint_and_a_target_of_several_tokens(tmp_path):
    from rlrun.launch.preflight import preflight

    missing = [p for p in preflight(load(ON + [f"reward.model.checkpoint={tmp_path}/nope"]))
               if p.path == "reward.model.checkpoint"]
    assert len(missing) == 1 and "nope" in missing[0].message
    rm = save_tiny_model(tmp_path / "rm")
    assert not [p for p in preflight(load(ON + [f"reward.model.checkpoint={rm}"])) if p.path.startswith("reward.")]
    two = [p for p in preflight(load(ON + [f"reward.model.checkpoint={rm}", "reward.model.target=yes no"]))
           if p.path == "reward.model.target"]
    assert len(two) == 1 and "2 tokens" in two[0].message


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("rm"), seed=3)
    eng = HFEngine.from_dir(path, seed=0, batch_wait_s=0.01)
    srv = ThreadedServer(eng)
    srv.start()
    yield eng, srv.url
    srv.stop()
    eng.shutdown()


def test_token_ids_logprob_is_the_models_next_token_distribution(engine):
    eng, url = engine
    tok = build_tokenizer()
    ids = tok.encode("the cat sat on the mat")
    yes, no = tok.convert_tokens_to_ids(["yes", "no"])
    out = requests.post(f"{url}/generate", json={"input_ids": ids, "return_logprob": True, "token_ids_logprob": [yes, no],
                                                 "sampling_params": {"max_new_tokens": 2, "temperature": 0.0}},
                        timeout=60).json()
    rows = out["meta_info"]["output_token_ids_logprobs"]
    with torch.no_grad():  # the same forward by hand: position 0 after the prompt, position 1 after its greedy token
        lp0 = torch.log_softmax(eng.model(torch.tensor([ids])).logits[0, -1].float(), -1)
        lp1 = torch.log_softmax(eng.model(torch.tensor([ids + out["output_ids"][:1]])).logits[0, -1].float(), -1)
    assert [[t for _, t, _ in row] for row in rows] == [[yes, no], [yes, no]]
    # float32 forwards of the same weights, batch of one with and without a KV cache: ~1e-6 apart
    assert [lp for lp, _, _ in rows[0]] == pytest.approx([lp0[yes].item(), lp0[no].item()], abs=1e-4)
    assert [lp for lp, _, _ in rows[1]] == pytest.approx([lp1[yes].item(), lp1[no].item()], abs=1e-4)


def test_a_discriminative_judge_scores_the_yes_token_probability(engine):
    eng, url = engine
    tok = build_tokenizer()
    judge = Judge(url=url, mode="discriminative", prompt_template="{prompt} {response} is {label} ?", target="yes",
                  tokenizer=tok)
    metrics: dict = {}
    got = score_batch("reward_model", ["1", "2"], ["3", "3"], prompts=["the answer", "the answer"], judge=judge,
                      metrics=metrics)
    with torch.no_grad():
        want = [torch.softmax(eng.model(torch.tensor([tok.encode(f"the answer {r} is 3 ?")])).logits[0, -1], -1)
                [tok.convert_tokens_to_ids("yes")].item() for r in ("1", "2")]
    assert got == pytest.approx(want, rel=1e-4) and got[0] != got[1]
    assert (metrics["reward/count"], metrics["reward/errors"], metrics["reward/timeouts"]) == (2, 0, 0)


def test_a_generative_judge_reads_its_score_with_the_parser(engine):
    eng, url = engine
    judge = Judge(url=url, mode="generative", prompt_template="{prompt} {response}", parser=r"(\d+)",
                  max_new_tokens=6, tokenizer=None)
    prompts = [f"{w} answer" for w in ("the", "a", "cat", "dog", "sat", "on", "mat", "is")]
    texts = [requests.post(f"{url}/generate", json={"text": f"{p} 7", "sampling_params": {
        "max_new_tokens": 6, "temperature": 0.0}}, timeout=60).json()["text"] for p in prompts]
    failures: list = []
    metrics: dict = {}
    got = score_batch("reward_model", ["7"] * 8, [None] * 8, prompts=prompts, judge=judge, failures=failures,
                      metrics=metrics)
    for text, score in zip(texts, got):  # the greedy judgement's last number, or 0 and counted without one
        numbers = [w for w in text.split() if w.isdigit()]
        assert score == (float(numbers[-1]) if numbers else 0.0)
    assert metrics["reward/errors"] == sum(not any(w.isdigit() for w in t.split()) for t in texts) == len(failures)


def test_parse_score_takes_the_last_match_and_refuses_a_judgement_without_one():
    assert parse_score(r"Score: (\d+(?:\.\d+)?)", "Score: 3 ... final Score: 7.5") == 7.5
    with pytest.raises(JudgeError):
        parse_score(r"Score: (\d+)", "no verdict")


def test_an_unreachable_reward_engine_scores_zero_and_is_counted():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = Judge(url=f"http://127.0.0.1:{port}", mode="discriminative", prompt_template="{prompt}", target="yes",
                  tokenizer=build_tokenizer(), max_retries=1, backoff_s=0.01, timeout_s=2.0)
    metrics: dict = {}
    failures: list = []
    assert score_batch("reward_model", ["a", "b", "c"], [None] * 3, prompts=["x"] * 3, judge=judge, metrics=metrics,
                       failures=failures) == [0.0, 0.0, 0.0]
    assert metrics["reward/errors"] == 3 and [i for i, _ in failures] == [0, 1, 2]
    assert "reward engines at" in failures[0][1]


def test_a_slow_reward_engine_times_out_and_is_counted(engine):
    import http.server
    import threading

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            threading.Event().wait(3)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        judge = Judge(url=f"http://127.0.0.1:{srv.server_address[1]}", mode="generative", prompt_template="{prompt}",
                      timeout_s=0.3, max_retries=0)
        metrics: dict = {}
        assert score_batch("reward_model", ["a", "b"], [None] * 2, prompts=["x"] * 2, judge=judge,
                           metrics=metrics) == [0.0, 0.0]
        assert (metrics["reward/timeouts"], metrics["reward/errors"]) == (2, 0)
    finally:
        srv.shutdown()


def test_the_judge_renders_the_templates_and_a_multi_token_target_is_an_error():
    tok = build_tokenizer()
    judge = Judge(url="http://x", mode="discriminative", prompt_template="Q: {prompt} A: {response} gold {label}",
                  target="{response}", tokenizer=tok)
    body = judge.request("2 + 2", "4", "4")
    assert body["text"] == "Q: 2 + 2 A: 4 gold 4" and body["token_ids_logprob"] == [tok.convert_tokens_to_ids("4")]
    assert "token_ids_logprob" not in judge.request("p", "", "4")  # an empty answer has no token: it scores 0
    assert judge.score(judge.request("p", "", "4"), {}) == 0.0
    with pytest.raises(JudgeError):
        judge.request("p", "the cat", "4")
    assert math.isclose(judge.score(body, {"meta_info": {"output_token_ids_logprobs": [[[math.log(0.25), 9, None]]]}}),
                        0.25)
