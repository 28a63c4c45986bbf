"""Run invariants (rlrun.guard.invariants) through loop.run's recording stand-in (tests/unit/test_loop.py):
each injected failure stops the loop at the rollout it happens in, names its check, and comes before
the weight push and the save of that rollout; warn severity logs and goes on."""
from __future__ import annotations

import dataclasses
import io
import json
import math

import pytest
import torch
from test_loop import _Run

from rlrun.loops import sync_loop as loop
from rlrun.config import ConfigError, load
from rlrun.config.schema import CheckSeverity
from rlrun.data import Sample
from rlrun.data.sample import Status
from rlrun.guard.invariants import CHECKS, MISMATCH, InvariantError, Invariants


def run_with_checks(r: _Run, tmp_path, out=None):
    inv = Invariants(r.cfg, tmp_path, out=out or io.StringIO())
    return inv, dataclasses.replace(r.parts(), invariants=inv)


def test_every_check_has_its_severity_setting_and_a_typo_is_refused():
    assert set(CHECKS) == set(CheckSeverity.model_fields)
    with pytest.raises(ConfigError) as e:
        load(["checks.severity.nonfinit=warn"])
    assert "checks.severity.nonfinit" in str(e.value)
    with pytest.raises(ConfigError, match="checks.severity.groups"):
        load(["checks.severity.groups=loud"])
    with pytest.raises(ConfigError, match="checks.watchdog.on_stall"):
        load(["checks.watchdog.on_stall=later"])


def test_nan_in_the_loss_stops_before_that_rollouts_push_and_save(tmp_path):
    r = _Run(["rollout.num_rollout=4", "checkpoint.save_interval=1"])
    real = r.trainer.train_step
    r.trainer.train_step = lambda b: {**real(b), "train/loss": math.nan} if len(r.logged) == 2 else real(b)
    inv, parts = run_with_checks(r, tmp_path)
    with pytest.raises(InvariantError) as e:
        loop.run(parts)
    assert e.value.check == "nonfinite"
    assert "failed at rollout 2" in str(e.value) and "train/loss=nan" in str(e.value)
    done = [c for c in r.calls if c[0] in ("sync", "save")]
    assert done == [("sync", 1), ("save", 0), ("sync", 2), ("save", 1)]  # rollout 2: neither pushed nor saved
    assert [rid for rid, _ in r.logged] == [0, 1]


def test_nan_in_a_reward_stops_before_any_training(tmp_path):
    r = _Run(["rollout.num_rollout=2"])
    real = r.collect

    def collect(rid, sampling):
        samples, kept, info = real(rid, sampling)
        samples[3].reward = math.inf
        return samples, kept, info
    r.collect = collect
    inv, parts = run_with_checks(r, tmp_path)
    with pytest.raises(InvariantError, match=r"non-finite rewards of samples \[3\]") as e:
        loop.run(parts)
    assert e.value.check == "nonfinite" and not [c for c in r.calls if c[0] == "train"]


def test_a_resume_that_would_train_nothing_stops_before_any_rollout(tmp_path):
    r = _Run(["rollout.num_rollout=5"], start=5)
    inv, parts = run_with_checks(r, tmp_path)
    with pytest.raises(InvariantError, match="resumes at rollout 5 but rollout.num_rollout=5") as e:
        loop.run(parts)
    assert e.value.check == "resume_trains" and "raise rollout.num_rollout" in str(e.value)
    assert [c[0] for c in r.calls] == ["restore"]
    # warn: the run ends as before (nothing to do), with the warning said
    r = _Run(["rollout.num_rollout=5", "checks.severity.resume_trains=warn"], start=5)
    out = io.StringIO()
    inv, parts = run_with_checks(r, tmp_path, out)
    assert loop.run(parts) == {"steps": 0}
    assert "warning: run invariant 'resume_trains' failed" in out.getvalue()


def test_a_run_that_keeps_nothing_ends_with_resume_trains_failed(tmp_path):
    r = _Run(["rollout.num_rollout=2"])
    real = r.collect
    r.collect = lambda rid, sampling: (real(rid, sampling)[0], [], {})  # every group dropped
    inv, parts = run_with_checks(r, tmp_path)
    with pytest.raises(InvariantError, match="2 rollouts ran but no optimizer step was taken") as e:
        loop.run(parts)
    assert e.value.check == "resume_trains"


def _broken_ids(r, how):
    real = r.collect

    def collect(rid, sampling):
        samples, kept, info = real(rid, sampling)
        if how == "missing":
            samples[0].group_id = -1
        else:  # the first prompt's group id also on a sample of another prompt
            samples[-1].group_id = 0
            samples[-1].prompt_tokens = [7, 8]
            samples.insert(1, samples.pop())
        return samples, samples, info
    r.collect = collect


@pytest.mark.parametrize("how,said", [("missing", "samples have no group id (-1)"),
                                      ("mixed", "group 0 holds samples of 2 different prompts")])
def test_broken_group_ids_stop_before_the_advantages(tmp_path, how, said):
    r = _Run(["rollout.num_rollout=2"])
    _broken_ids(r, how)
    inv, parts = run_with_checks(r, tmp_path)
    with pytest.raises(InvariantError, match="group ids broken") as e:
        loop.run(parts)
    assert e.value.check == "groups" and said in str(e.value) and "failed at rollout 0" in str(e.value)
    assert [c[0] for c in r.calls] == ["restore", "collect"]
    assert inv.pending["checks/groups"] >= 1


def test_warn_severity_logs_and_goes_on_with_the_metric(tmp_path):
    r = _Run(["rollout.num_rollout=11", "checks.severity.groups=warn"])
    _broken_ids(r, "mixed")
    out = io.StringIO()
    inv, parts = run_with_checks(r, tmp_path, out)
    loop.run(parts)
    said = out.getvalue()
    assert said.count("warning: run invariant 'groups' failed") == 2 and len(inv.warnings) == 11
    assert "failed at rollout 0" in said and "failed at rollout 9" in said and "(10th time;" in said  # 1st, 10th
    assert [c for c in r.calls if c[0] == "save"] == [("save", 10)]


def _samples(rewards, truncated=(), group=2, versions=None):
    return [Sample(prompt=str(i // group), prompt_tokens=[i // group], response_tokens=[1, 2], reward=r,
                   status=Status.TRUNCATED if i in truncated else Status.COMPLETED, group_id=i // group,
                   token_versions=None if versions is None else [versions[i]] * 2)
            for i, r in enumerate(rewards)]


def test_zero_variance_and_truncation_reward_warn_with_their_values():
    cfg = load(["checks.zero_variance_max=0.5", "checks.truncation_corr_max=0.5"])
    out = io.StringIO()
    inv = Invariants(cfg, out=out)
    # groups (0,0) (0.5,0.5) (0,1): 2 of 3 groups flat below exact_match's top score 1.0
    s = _samples([0.0, 0.0, 0.5, 0.5, 0.0, 1.0], truncated=(2, 3))
    inv.samples(0, s, s)
    m = inv.pop_metrics()
    assert m["checks/zero_variance"] == pytest.approx(2 / 3) and m["rollout/solved_groups"] == 0.0
    # 2 truncated, 4 complete: fewer than TRUNCATION_MIN_EACH (8) of a kind, not judged
    assert m["checks/truncation_reward"] == 0.0 and "'truncation_reward'" not in out.getvalue()
    # 8 truncated (7 score 1) and 8 complete (1 scores 1): t and r each have mean 1/2 and variance 1/4,
    # cov = E[t r] - 1/4 = 7/16 - 4/16 = 3/16, so Pearson r = (3/16) / (1/4) = 0.75 (hand-computed)
    s = _samples([1.0] * 7 + [0.0] + [1.0] + [0.0] * 7, truncated=range(8))
    inv.samples(1, s, s)
    assert inv.pop_metrics()["checks/truncation_reward"] == pytest.approx(0.75, abs=1e-12)  # float rounding only
    assert "'zero_variance' failed" in out.getvalue() and "'truncation_reward' failed at rollout 1" in out.getvalue()


def test_the_zero_variance_fix_names_the_response_length_where_every_sample_was_cut():
    cfg = load(["checks.zero_variance_max=0.5"])
    out = io.StringIO()
    # groups (0,0) (0,0) (1,0): the two flat ones were cut at rollout.max_response_len=1 (conf/data/toy.yaml)
    s = _samples([0.0, 0.0, 0.0, 0.0, 1.0, 0.0], truncated=(0, 1, 2, 3))
    Invariants(cfg, out=out).samples(0, s, s)
    assert "Fix: every sample of 2 of these 2 groups was cut at rollout.max_response_len=1 tokens: raise " \
        "rollout.max_response_len" in out.getvalue(), out.getvalue()
    out = io.StringIO()  # agreement without truncation: the response length is not the cause
    s = _samples([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    Invariants(cfg, out=out).samples(0, s, s)
    assert "'zero_variance' failed" in out.getvalue() and "max_response_len" not in out.getvalue()


def test_truncation_reward_needs_enough_of_both_kinds():
    """9 truncated samples all scoring 1 and 7 complete ones all scoring 0 correlate perfectly, but 7
    complete samples are fewer than TRUNCATION_MIN_EACH: not judged (max_response_len=1 runs have 0-2)."""
    out = io.StringIO()
    inv = Invariants(load(["checks.truncation_corr_max=0.5"]), out=out)
    s = _samples([1.0] * 9 + [0.0] * 7, truncated=range(9))
    inv.samples(0, s, s)
    assert inv.pop_metrics()["checks/truncation_reward"] == 0.0 and "truncation_reward" not in out.getvalue()
    s = _samples([1.0] * 8 + [0.0] * 8, truncated=range(8))  # 8 and 8: judged, r = 1
    inv.samples(1, s, s)
    assert inv.pop_metrics()["checks/truncation_reward"] == pytest.approx(1.0, abs=1e-12)  # float rounding only
    assert "'truncation_reward' failed at rollout 1" in out.getvalue()


def test_staleness_above_the_bound_stops_async():
    cfg = load(["train.async_train=true", "train.colocate=false", "rollout.num_gpus=1", "rollout.max_staleness=1"])
    inv = Invariants(cfg, out=io.StringIO())
    ok = _samples([0.0, 1.0, 0.0, 1.0], versions=[3, 3, 2, 2])  # trainer at version 3: lag 0 and 1
    inv.samples(3, ok, ok)
    assert inv.pop_metrics()["checks/staleness"] == 1.0
    old = _samples([0.0, 1.0, 0.0, 1.0], versions=[3, 3, 1, 1])
    with pytest.raises(InvariantError, match="2 policy versions behind .*max_staleness=1"):
        inv.samples(3, old, old)


def test_a_mismatch_jump_after_a_resume_is_measured_against_the_runs_history(tmp_path):
    cfg = load(["checks.severity.logprob_jump=stop"])
    rows = [{"rollout": i, MISMATCH: v} for i, v in enumerate([0.01, 0.02, 0.03])]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    inv = Invariants(cfg, tmp_path, out=io.StringIO())
    inv.resume(3)  # the history comes from metrics.jsonl: median 0.02
    inv.trained(3, {MISMATCH: 0.1})  # 5x: under the factor 10
    assert inv.pop_metrics()["checks/logprob_jump"] == pytest.approx(5.0)
    with pytest.raises(InvariantError, match=r"jumped to 0.5, 20.0x its median 0.025 over 4 earlier"):
        inv.trained(4, {MISMATCH: 0.5})  # median of 0.01 0.02 0.03 0.1 = 0.025


def test_nonfinite_advantages_stop_the_batch():
    inv = Invariants(load([]), out=io.StringIO())
    with pytest.raises(InvariantError, match=r"non-finite advantages of samples \[1\]"):
        inv.batch(0, [torch.zeros(3), torch.tensor([0.0, math.nan])])


def test_a_custom_generate_function_may_group_samples_of_several_prompts():
    """slime's multi-agent example returns samples with prompts of their own in the prompt's group: with a
    custom rollout.generate_fn only missing / split ids count as broken."""
    from rlrun.data.sample import Sample
    from rlrun.guard.invariants import broken_groups

    samples = [Sample(prompt=str(p), prompt_tokens=p, group_id=0) for p in ([1, 2], [1, 2], [7, 8])]
    assert broken_groups(samples, "grpo", 3) == ["group 0 holds samples of 2 different prompts"]
    assert broken_groups(samples, "grpo", 3, one_prompt=False) == []
    samples[0].group_id = -1
    assert broken_groups(samples, "grpo", 3, one_prompt=False) == ["1 samples have no group id (-1)"]


def test_groups_that_agree_at_the_top_reward_are_convergence_not_a_zero_variance_warning():
    """The default job once the echo task is learned: every group scores exact_match's top 1.0. That is said
    once as convergence (rollout/solved_groups), not warned; groups that agree below the top still warn."""
    cfg = load([])  # data=toy: rm_type exact_match, top score 1.0; checks.zero_variance_max 0.9
    out = io.StringIO()
    inv = Invariants(cfg, out=out)
    solved = _samples([1.0] * 128, group=8)  # the default job's 16 prompts x 8 samples, all right
    inv.samples(0, solved, solved)
    inv.samples(1, solved, solved)
    m = inv.pop_metrics()
    assert m["checks/zero_variance"] == 0.0 and m["rollout/solved_groups"] == 1.0
    assert "warning" not in out.getvalue() and inv.warnings == []  # (the samples check passes: 128 of 128)
    assert out.getvalue().count("100% of the trained groups are solved") == 1  # said once, not every rollout
    stuck = _samples([0.0] * 128, group=8)  # every sample wrong: no signal
    inv.samples(2, stuck, stuck)
    assert inv.pop_metrics()["checks/zero_variance"] == 1.0
    assert "run invariant 'zero_variance' failed at rollout 2: 100% of the trained groups have rewards that all " \
           "agree below the top reward" in out.getvalue()
    # a custom reward has no known top score: agreement is the old warning, at any value
    custom = Invariants(load(["data.rm_type=my_rewards:score"]), out=io.StringIO())
    custom.samples(0, solved, solved)
    assert custom.pop_metrics()["checks/zero_variance"] == 1.0 and len(custom.warnings) == 1


def test_an_engine_serving_a_uniform_distribution_stops_the_run():
    """engine_uniform: the 2026-11-28 GPU run whose SGLang engine never loaded a tied Qwen3-MoE head answered -ln 64 for
    every token. One value below -1 nat over >= 32 tokens stops the run; a collapsed policy (log-probs near 0), a
    normal spread, or too few tokens do not."""
    inv = Invariants(load([]), out=io.StringIO())

    def rollout(lps_per_sample):
        s = _samples([0.0] * len(lps_per_sample))
        for x, lps in zip(s, lps_per_sample):
            x.response_tokens, x.rollout_logprobs = [1] * len(lps), lps
        return s

    uniform = rollout([[-math.log(64)] * 8] * 4)  # 32 tokens, all -ln 64
    with pytest.raises(InvariantError, match=r"engine_uniform.*-ln 64\.0") as e:
        inv.samples(0, uniform, uniform)
    assert e.value.check == "engine_uniform" and inv.pop_metrics()["checks/engine_uniform"] == 1.0
    for ok in (rollout([[-1e-6] * 8] * 4),                      # collapsed onto the answers: near 0
               rollout([[-4.1 - 0.01 * i for i in range(8)]] * 4),  # a random-init spread
               rollout([[-math.log(64)] * 6] * 4)):             # 24 tokens: not judged
        inv.samples(1, ok, ok)
    assert inv.pop_metrics()["checks/engine_uniform"] == 0.0
