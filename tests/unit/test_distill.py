"""On-policy distillation (algo.distill): the advantage term against hand-computed values, its metrics, the rules,
the preflight and slime's OPD flags."""
from __future__ import annotations

import pytest
import torch

from rlrun.algo import compute_advantages
from rlrun.config import ConfigError, load
from rlrun.loops import steps
from rlrun.train.base import TrainBatch


def test_the_reverse_kl_term_is_added_to_the_grpo_advantage_before_whitening():
    rewards = torch.tensor([1.0, 0.0])  # one group of 2: GRPO gives +0.7071, -0.7071 (unbiased std sqrt(0.5))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]])
    teacher = torch.tensor([[-1.5, -1.0], [-3.0, 0.0]])
    adv, _ = compute_advantages("grpo", rewards, 2, loss_mask=mask, logp=logp, teacher_logp=teacher, opd_kl_coef=0.5)
    g = 0.5 / (0.5 ** 0.5 + 1e-6)  # (r - mean) / (std + 1e-6)
    # A - 0.5 * (logp - teacher): row 0: g - 0.5*0.5, g - 0.5*(-1); row 1: -g - 0.5*2.5, and the masked token 0
    want = torch.tensor([[g - 0.25, g + 0.5], [-g - 1.25, 0.0]])
    assert torch.allclose(adv, want, atol=1e-6)  # fp32 arithmetic on values of order 1
    white, _ = compute_advantages("grpo", rewards, 2, loss_mask=mask, logp=logp, teacher_logp=teacher,
                                  opd_kl_coef=0.5, normalize_advantages=True)
    kept = want[mask > 0]
    assert torch.allclose(white[mask > 0], (kept - kept.mean()) / (kept.std() + 1e-8), atol=1e-5)


def test_without_a_teacher_nothing_changes():
    rewards, mask = torch.tensor([1.0, 0.0]), torch.ones(2, 3)
    a, _ = compute_advantages("grpo", rewards, 2, loss_mask=mask)
    b, _ = compute_advantages("grpo", rewards, 2, loss_mask=mask, logp=torch.zeros(2, 3), opd_kl_coef=3.0)
    assert torch.equal(a, b)


def _batch():
    return TrainBatch(tokens=[torch.arange(4), torch.arange(3)], response_start=[2, 2],
                      loss_mask=[torch.tensor([1.0, 1.0]), torch.tensor([1.0])],
                      old_logp=[torch.tensor([-1.0, -2.0]), torch.tensor([-0.5])])


def test_replace_drops_the_reward_advantage_and_the_metrics_are_slimes():
    cfg = load(["algo.distill.teacher=/x", "algo.distill.reward=replace", "algo.distill.coef=2.0"])
    teacher = [torch.tensor([-1.5, -1.0]), torch.tensor([-3.0])]
    b = steps.add_advantages(cfg, _batch(), [1.0, 0.0], 2, [0, 0], teacher)
    # rewards replaced by 0: the GRPO advantage is 0; the term alone: -2 * (student - teacher)
    assert [x.tolist() for x in b.advantages] == [[-1.0, 2.0], [-5.0]]
    m = steps.distill_metrics(b, teacher)
    # per sample token means of student - teacher: (0.5 + -1) / 2 = -0.25 and 2.5; per token: 2 / 3
    assert m["distill/reverse_kl"] == pytest.approx((-0.25 + 2.5) / 2)
    assert m["distill/reverse_kl_token"] == pytest.approx(2.0 / 3)
    assert m["distill/teacher_logp"] == pytest.approx(-5.5 / 3) and m["distill/student_logp"] == pytest.approx(-3.5 / 3)


@pytest.mark.parametrize("overrides,key", [
    (["algo.distill.coef=0.5"], "algo.distill.coef"),                      # no teacher: would be ignored
    (["algo.distill.reward=replace"], "algo.distill.reward"),
    (["algo.distill.teacher=/t", "algo.distill.coef=0"], "algo.distill.coef"),
    (["algo.distill.teacher=/t", "algo=sft"], "algo.distill.teacher"),     # SFT generates no samples
    (["algo.distill.teacher=/t", "algo.distill.reward=replace", "algo=ppo"], "algo.distill.reward"),
])
def test_distillation_settings_that_cannot_work_are_refused(overrides, key):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    assert key in [p.path for p in e.value.problems]


def test_a_backend_without_a_teacher_forward_is_refused():
    from rlrun.config.kinds import BACKENDS, BackendKind

    BACKENDS.register(BackendKind("noteacher", needs_gpu=False, model_parallel=False, critic=False,
                                  state_dtypes=("fp32",), bf16_grads=False, cuda_graphs=False, sliding_window=True,
                                  families=("qwen3",)))
    try:
        with pytest.raises(ConfigError) as e:
            load(["algo.distill.teacher=/t", "train.backend=noteacher"])
        assert "algo.distill.where" in [p.path for p in e.value.problems]
    finally:
        BACKENDS.unregister("noteacher")


def test_preflight_refuses_a_teacher_of_another_architecture(tmp_path):
    from rlrun.launch.preflight import preflight
    from rlrun.train.hf_model import build_causal_lm

    build_causal_lm(load(["model.num_layers=3"]).model, None, 0).save_pretrained(tmp_path)  # the tiny model has 2
    cfg = load([f"algo.distill.teacher={tmp_path}"])
    problems = [p for p in preflight(cfg) if p.path == "algo.distill.teacher"]
    assert len(problems) == 1 and "model.num_layers 2 differs" in problems[0].message
    same = tmp_path / "same"
    build_causal_lm(cfg.model, None, 0).save_pretrained(same)
    assert not [p for p in preflight(load([f"algo.distill.teacher={same}"])) if p.path == "algo.distill.teacher"]


def _decode(text: str):
    from rlrun.interop.slime_decode import decode, parse_args

    return decode(parse_args(text.split()))


def test_slimes_opd_megatron_flags_import():
    d = _decode("--use-opd --opd-type megatron --opd-teacher-load /t --opd-kl-coef 0.5")
    assert not d.unknown
    assert d.values["algo.distill.teacher"] == "/t" and d.values["algo.distill.coef"] == 0.5


@pytest.mark.parametrize("text,flag", [
    ("--use-opd --opd-type sglang", "--opd-type"),                          # no teacher server in rlrun yet
    ("--use-opd --opd-teacher-load /t", "--use-opd"),                        # slime: --opd-type is required
    ("--use-opd --opd-type megatron", "--opd-type"),                         # slime: the teacher is required
    ("--opd-teacher-load /t", "--opd-teacher-load"),                         # slime refuses it without --use-opd
])
def test_opd_flags_slime_refuses_are_refused(text, flag):
    d = _decode(text)
    assert flag in [o.flag for o, _ in d.unknown]


def test_distillation_exports_slimes_opd_flags():
    from rlrun.interop.slime_encode import encode

    enc = encode(load(["algo.distill.teacher=/t", "algo.distill.coef=0.5"]).to_dict())
    lines = [" ".join(line) for arr in enc.arrays.values() for line in arr]
    assert {"--use-opd", "--opd-type megatron", "--opd-teacher-load /t", "--opd-kl-coef 0.5"} <= set(lines)
