"""SFT (algo.loss_type=sft_loss): the loss against hand-computed values, the samples a data row becomes
(single-turn and multi-turn loss masks), the rules and the plan."""
from __future__ import annotations

import math

import pytest
import torch

from rlrun.algo import AlgoParams, compute_loss
from rlrun.algo.loss import LOSSES
from rlrun.config import ConfigError, load
from rlrun.config.kinds import LOSS_TYPES
from rlrun.config.plan import make_plan
from rlrun.data.dataset import DataError, PromptItem
from rlrun.data.sft import conversation_tokens, sft_sample
from rlrun.data.toy import build_toy_tokenizer


def test_every_loss_type_has_its_function():
    assert set(LOSSES) == set(LOSS_TYPES.names())


def _params(per_token: bool) -> AlgoParams:
    cfg = load(["algo=sft", f"train.calculate_per_token_loss={str(per_token).lower()}"])
    return AlgoParams.from_config(cfg)


@pytest.mark.parametrize("per_token", [False, True])
def test_sft_loss_is_the_mean_nll_of_trained_tokens(per_token):
    # two samples packed: [-1, -2 (masked), -3] and [-0.5]; the masked slot holds garbage that must not count
    logp = torch.tensor([-1.0, float("-inf"), -3.0, -0.5], requires_grad=True)
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
    cu = torch.tensor([0, 3, 4])
    loss, m = compute_loss(logp, None, None, None, torch.zeros(4), mask, None, _params(per_token), cu_seqlens=cu)
    # per sample: ((1 + 3) / 2 + 0.5) / 2 = 1.25; per token: (1 + 3 + 0.5) / 3 = 1.5
    assert loss.item() == pytest.approx(1.5 if per_token else 1.25, abs=1e-6)  # fp32 sums of exact halves
    assert m["loss"].item() == pytest.approx(loss.item())
    loss.backward()
    want = [-1 / 3, 0, -1 / 3, -1 / 3] if per_token else [-0.25, 0, -0.25, -0.5]
    assert logp.grad.tolist() == pytest.approx(want, abs=1e-6)
    assert not math.isnan(logp.grad[1].item())


def _item(prompt, label=None, tok=None):
    tok = tok or build_toy_tokenizer()
    tokens = tok(prompt, add_special_tokens=False)["input_ids"] if isinstance(prompt, str) else []
    return PromptItem(0, prompt, prompt if isinstance(prompt, str) else "", tokens, label)


def test_a_prompt_and_label_train_the_label_tokens():
    tok = build_toy_tokenizer()
    s = sft_sample(_item("73915", "5", tok), tok, group_id=3)
    assert tok.decode(s.prompt_tokens) == "73915" and tok.decode(s.response_tokens) == "5"
    assert s.loss_mask == [1] and s.reward == 0.0 and s.group_id == 3


def test_a_conversation_trains_the_assistant_turns_only():
    tok = build_toy_tokenizer()  # its chat template joins the contents
    msgs = [{"role": "user", "content": "12"}, {"role": "assistant", "content": "ab"},
            {"role": "user", "content": "3"}, {"role": "assistant", "content": "cde"}]
    tokens, mask = conversation_tokens(msgs, tok)
    assert tok.decode(tokens) == "12ab3cde" and mask == [0, 0, 1, 1, 0, 1, 1, 1]
    s = sft_sample(_item(msgs, tok=tok), tok, group_id=0)
    assert tok.decode(s.prompt_tokens) == "12" and tok.decode(s.response_tokens) == "ab3cde"
    assert s.loss_mask == [1, 1, 0, 1, 1, 1]


def test_the_generation_header_is_context_not_trained():
    tok = build_toy_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }} {% endfor %}"
                         "{% if add_generation_prompt %}a:{% endif %}")
    tokens, mask = conversation_tokens([{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}], tok)
    assert tok.decode(tokens) == "u:1 a:2 " and mask == [0, 0, 0, 0, 0, 0, 1, 1]  # "a:" header: 0; "2 ": 1


def test_a_template_that_rewrites_earlier_turns_is_refused():
    tok = build_toy_tokenizer()
    tok.chat_template = "{% for m in messages|reverse %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(DataError, match="rewrites earlier turns"):
        conversation_tokens([{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}], tok)


def test_a_row_without_a_response_is_refused():
    tok = build_toy_tokenizer()
    with pytest.raises(DataError, match="data.label_key"):
        sft_sample(_item("12", None, tok), tok, 0)
    with pytest.raises(DataError, match="nothing to train"):
        sft_sample(_item([{"role": "user", "content": "1"}], tok=tok), tok, 0)


def test_sft_plans_no_engines():
    plan = make_plan(load(["algo=sft"]))
    assert plan.num_engines == 0 and plan.rollout_gpus == 0
    assert {s.role for s in plan.placement} == {"trainer"} and plan.samples_per_rollout == 16


@pytest.mark.parametrize("override,key", [
    ("rollout.n_samples_per_prompt=4", "rollout.n_samples_per_prompt"), ("algo.use_kl_loss=true", "algo.use_kl_loss"),
    ("algo.entropy_coef=0.01", "algo.entropy_coef"), ("train.async_train=true", "train.async_train"),
    ("rollout.dynamic_sampling=nonzero_std", "rollout.dynamic_sampling"), ("data.label_key=null", "data.label_key"),
    ("algo.advantage_estimator=ppo", "algo.advantage_estimator"),
])
def test_settings_sft_cannot_use_are_refused(override, key):
    with pytest.raises(ConfigError) as e:
        load(["algo=sft", override])
    assert key in [p.path for p in e.value.problems]


def test_sft_experiment_validates():
    cfg = load(["experiment=tiny-sft-cpu"])
    assert cfg.algo.loss_type == "sft_loss" and cfg.rollout.n_samples_per_prompt == 1


SFT_FLAGS = ("--loss-type sft_loss --rollout-function-path slime.rollout.sft_rollout.generate_rollout "
             "--disable-compute-advantages-and-returns --debug-train-only --loss-mask-type qwen3 --input-key messages")


def _decode(text: str, entry: str = "train.py"):
    from rlrun.interop.slime_decode import decode, parse_args

    return decode(parse_args(text.split()), entry)


def test_slimes_sft_flags_import():
    d = _decode(SFT_FLAGS, "train_async.py")  # slime's SFT scripts launch train_async.py
    assert not d.unknown
    v = d.values
    assert v["algo.loss_type"] == "sft_loss" and v["data.apply_chat_template"] is True
    assert v["train.async_train"] is False and v["data.input_key"] == "messages"
    assert sum("no change" in n for n in d.notes) == 4


@pytest.mark.parametrize("flag", ["--debug-train-only", "--disable-compute-advantages-and-returns",
                                  "--loss-mask-type qwen", "--rollout-function-path slime.rollout.sft_rollout.generate_rollout",
                                  "--rollout-function-path my.rollout.fn", "--loss-type custom_loss"])
def test_sft_flags_without_sft_loss_are_refused(flag):
    d = _decode(flag)
    assert [o.flag for o, _ in d.unknown] == [flag.split()[0]]


def test_sft_exports_slimes_sft_flags():
    from rlrun.interop.slime_encode import encode

    cfg = load(["algo=sft"]).to_dict()
    flags = {w for arr in encode(cfg).arrays.values() for line in arr for w in line}
    assert {"--loss-type", "sft_loss", "--debug-train-only", "--disable-compute-advantages-and-returns",
            "slime.rollout.sft_rollout.generate_rollout"} <= flags
