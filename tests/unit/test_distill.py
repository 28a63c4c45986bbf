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
    ("--use-opd --opd-type sglang", "--opd-type"),                          # no --rm-url: no teacher server named
    ("--use-opd --opd-type sglang --opd-teacher-load /t --rm-url http://h:1/generate", "--opd-teacher-load"),
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


# ---- the served teacher (algo.distill.where=engine; slime --opd-type sglang) ---------------------------------------

SERVED = ["algo.distill.where=engine", "algo.distill.teacher=/t"]


@pytest.mark.parametrize("overrides,key", [
    ([*SERVED, "algo.distill.url=http://h:1/generate"], "algo.distill.teacher"),   # both: a run asks one
    (["algo.distill.teacher=/t", "algo.distill.url=http://h:1/generate"], "algo.distill.url"),  # where=trainer
    (["algo.distill.teacher=/t", "algo.distill.served.num_engines=2"], "algo.distill.served.num_engines"),
    (["algo.distill.served.colocate=false"], "algo.distill.served.colocate"),      # no teacher at all
    (["algo.distill.where=engine", "algo.distill.url=h:1/generate"], "algo.distill.url"),  # not a URL
    ([*SERVED, "algo.distill.served.engine=sglang"], "algo.distill.served.engine"),  # GPU kind on the CPU
    ([*SERVED, "algo.distill.served.num_engines=2"], "algo.distill.served.num_engines"),  # 1 rollout engine to share
])
def test_served_teacher_settings_that_cannot_work_are_refused(overrides, key):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    assert key in [p.path for p in e.value.problems]


def test_an_engine_kind_without_prompt_logprobs_cannot_serve_the_teacher():
    from rlrun.config.kinds import ENGINES, EngineKind

    with ENGINES.registered(EngineKind("noprompt", needs_gpu=False, max_gpus_per_engine=1)):
        with pytest.raises(ConfigError) as e:
            load([*SERVED, "algo.distill.served.engine=noprompt"])
    p = next(p for p in e.value.problems if p.path == "algo.distill.served.engine")
    assert "prompt log-probs" in p.message and "hf" in p.fix


def test_the_plan_places_the_teacher_engines():
    from rlrun.config.plan import make_plan

    cfg = load(SERVED)
    assert cfg.algo.distill.served.engine == cfg.rollout.engine == "hf"  # derived: the rollout's kind
    plan = make_plan(cfg)
    teacher = [s for s in plan.placement if s.role == "teacher"]
    rollout = [s for s in plan.placement if s.role == "engine"]
    assert plan.teacher_engines == 1 and plan.teacher_gpus == 0  # colocated: on the rollout engine's slot
    assert [(s.node, s.gpu, s.rank) for s in teacher] == [(s.node, s.gpu, s.rank) for s in rollout]
    assert any("teacher engine" in n for n in plan.notes)
    assert make_plan(load(["algo.distill.teacher=/t"])).teacher_engines == 0  # where=trainer: none
    assert make_plan(load(["algo.distill.where=engine", "algo.distill.url=http://h:1/generate"])).teacher_engines == 0


def test_the_engine_teacher_reads_sglangs_input_token_logprobs():
    from rlrun.parts.teacher import EngineTeacher, TeacherError

    body = EngineTeacher.request([5, 6, 7, 8], 2)
    # one before the response: SGLang's row at logprob_start_len itself is None (its logits start there)
    assert body["logprob_start_len"] == 1 and body["sampling_params"]["max_new_tokens"] == 0 and body["return_logprob"]
    answer = {"meta_info": {"input_token_logprobs": [[None, 6, None], [-0.5, 7, None], [-1.25, 8, None]]}}
    assert EngineTeacher.parse(answer, 2).tolist() == [-0.5, -1.25]
    # slime's form (logprob_start_len 0): the whole sequence, the first None; the response is the last n
    whole = {"meta_info": {"input_token_logprobs": [[None, 5, None], [-2.0, 6, None], [-0.5, 7, None]]}}
    assert EngineTeacher.parse(whole, 1).tolist() == [-0.5]
    with pytest.raises(TeacherError, match="input_token_logprobs"):
        EngineTeacher.parse({"meta_info": {}}, 2)
    with pytest.raises(TeacherError, match="None"):
        EngineTeacher.parse(whole, 3)


def test_the_engine_teacher_asks_a_real_hf_engine(tmp_path):
    """EngineTeacher against the hf engine over HTTP: the response tokens' log-probs of the served model, as its own
    forward gives them; a dead server is an error naming the teacher after the retries."""
    from rlrun.parts.teacher import EngineTeacher, TeacherError
    from rlrun.rollout.hf_engine import HFEngine
    from rlrun.rollout.hf_server import ThreadedServer
    from rlrun.rollout.tiny_model import save_tiny_model

    engine = HFEngine.from_dir(save_tiny_model(tmp_path, seed=0), seed=1, batch_wait_s=0.0)
    srv = ThreadedServer(engine)
    srv.start()
    try:
        batch = TrainBatch(tokens=[torch.tensor([3, 4, 5, 6]), torch.tensor([7, 8, 9])], response_start=[2, 1],
                           loss_mask=[torch.ones(2), torch.ones(2)])
        got = EngineTeacher(f"{srv.url}/generate").log_probs(batch)
        for tokens, start, lp in zip(batch.tokens, batch.response_start, got):
            with torch.no_grad():
                full = torch.log_softmax(engine.model(input_ids=tokens[None]).logits[0, :-1].float(), -1)
            want = full[torch.arange(start - 1, len(tokens) - 1), tokens[start:]]
            assert torch.allclose(lp, want, atol=1e-5)  # float32, the same forward
    finally:
        srv.stop()
        engine.shutdown()
    with pytest.raises(TeacherError, match="failed 2 times"):
        EngineTeacher(f"{srv.url}/generate", max_retries=1, timeout_s=2, backoff_s=0.01).log_probs(batch)


def test_preflight_checks_the_served_teacher_and_the_teacher_url(tmp_path):
    from rlrun.launch.preflight import preflight
    from rlrun.train.hf_model import build_causal_lm

    cfg = load(["model.vocab_size=80"])
    build_causal_lm(cfg.model, None, 0).save_pretrained(tmp_path)
    problems = [p for p in preflight(load([*SERVED[:1], f"algo.distill.teacher={tmp_path}"]))
                if p.path == "algo.distill.teacher"]
    assert any("vocab_size 80 differs" in p.message for p in problems)
    with socket_free_port() as port:
        problems = preflight(load(["algo.distill.where=engine", f"algo.distill.url=http://127.0.0.1:{port}/generate"]))
    assert [p.path for p in problems if "does not answer" in p.message] == ["algo.distill.url"]


def socket_free_port():
    import contextlib
    import socket

    @contextlib.contextmanager
    def port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            yield s.getsockname()[1]  # bound, not listening: a connection is refused
    return port()


def test_slimes_opd_sglang_script_flags_import_and_export():
    from rlrun.interop.slime_encode import encode

    d = _decode("--use-opd --opd-type sglang --opd-kl-coef 1.0 --rm-url http://t:13141/generate "
                "--custom-rm-path slime.rollout.on_policy_distillation.reward_func "
                "--custom-reward-post-process-path slime.rollout.on_policy_distillation.post_process_rewards")
    assert not d.unknown
    assert d.values["algo.distill.where"] == "engine" and d.values["algo.distill.url"] == "http://t:13141/generate"
    assert d.values["algo.distill.reward"] == "replace" and d.values["data.rm_type"] == "zero"
    assert "algo.reward_post_process" not in d.values and "data.rm_url" not in d.values
    enc = encode(load(["algo.distill.where=engine", "algo.distill.url=http://t:13141/generate",
                       "algo.distill.reward=replace", "data.rm_type=zero"]).to_dict())
    lines = {" ".join(line) for arr in enc.arrays.values() for line in arr}
    assert {"--use-opd", "--opd-type sglang", "--rm-url http://t:13141/generate",
            "--custom-rm-path slime.rollout.on_policy_distillation.reward_func",
            "--custom-reward-post-process-path slime.rollout.on_policy_distillation.post_process_rewards"} <= lines
    assert not any(line.startswith(("--opd-teacher-load", "--rm-type")) for line in lines)
