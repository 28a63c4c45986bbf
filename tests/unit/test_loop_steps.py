"""The loop's phases in isolation: dynamic sampling, advantages per token, data order, seeds,
checkpoint pointers, metrics files."""
from __future__ import annotations

import json

import pytest
import torch

from rlrun import checkpoint as ckpt
from rlrun.config import load
from rlrun.data import Sample, Status
from rlrun.loops import steps
from rlrun.parts import sampling
from rlrun.metrics import METRICS_FILE, read_metrics


def _group(rewards, resp_len=2):
    return [Sample(prompt="", prompt_tokens=[5, 6], response_tokens=[7] * resp_len, reward=r, loss_mask=[1] * resp_len,
                   rollout_logprobs=[-1.0] * resp_len, status=Status.COMPLETED) for r in rewards]


def test_dynamic_sampling_filter_drops_groups_whose_rewards_agree():
    keep = sampling.group_filter("nonzero_std")
    assert [keep(g) for g in (_group([1, 1]), _group([0, 1]), _group([0, 0]))] == [False, True, False]
    assert sampling.group_filter(None) is None
    with pytest.raises(ValueError, match="rollout.dynamic_sampling"):
        sampling.group_filter("bogus")


def test_grpo_advantages_are_group_normalised_and_broadcast_per_token():
    cfg = load([])
    samples = _group([1.0, 0.0], resp_len=3) + _group([0.5, 0.5], resp_len=1)
    samples[1].response_tokens, samples[1].loss_mask, samples[1].rollout_logprobs = [7, 7], [1, 1], [-1.0, -1.0]
    batch = steps.add_advantages(cfg, steps.to_train_batch(samples), [s.reward for s in samples], 2)
    # group 1: mean 0.5, unbiased std sqrt(0.5) -> (+-0.5)/(0.7071+1e-6)
    a = 0.5 / (2 ** -0.5 + 1e-6)
    torch.testing.assert_close(batch.advantages[0], torch.full((3,), a))
    torch.testing.assert_close(batch.advantages[1], torch.full((2,), -a))
    torch.testing.assert_close(batch.advantages[2], torch.zeros(1))  # equal rewards: no signal
    assert batch.response_start == [2, 2, 2, 2] and batch.tokens[0].tolist() == [5, 6, 7, 7, 7]


def test_toy_prompts_are_written_into_the_run_dir_and_resume_in_order(tmp_path):
    from rlrun.data.toy import build_toy_tokenizer

    cfg, tok = load([]), build_toy_tokenizer()
    a = sampling.load_prompts(cfg, tok, tmp_path)
    assert (tmp_path / "data" / "toy.jsonl").is_file() and len(a) == sampling.TOY_PROMPTS
    a.next_batch(5)
    b = sampling.load_prompts(cfg, tok, tmp_path)
    b.load_state_dict(a.state_dict())
    assert [i.index for i in b.next_batch(8)] == [i.index for i in a.next_batch(8)]
    item = a.next_batch(1)[0]
    assert tok.decode(item.tokens) == item.text and item.label == item.text[-1]


def test_request_seeds_differ_per_sample_and_step():
    seeds = {sampling.request_seed(1234, r, i) for r in range(3) for i in range(64)}
    assert len(seeds) == 192 and all(0 <= s < 2**31 - 1 for s in seeds)


def test_latest_points_at_the_last_complete_checkpoint(tmp_path):
    assert ckpt.find_latest(tmp_path) is None
    for step in (2, 4):
        where = ckpt.iter_dir(tmp_path, step)
        ckpt.write_driver_state(where, ckpt.DriverState.capture(step, {"position": 8 * step}))
        ckpt.mark_latest(tmp_path, where)
    ckpt.iter_dir(tmp_path, 6).mkdir()  # killed while saving: never marked
    found = ckpt.find_latest(tmp_path)
    assert found.name == "iter_0000004" and ckpt.read_driver_state(found).data_state == {"position": 32}
    assert ckpt.find_latest(ckpt.iter_dir(tmp_path, 2)).name == "iter_0000002"  # checkpoint.load=an iter dir


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path):
    for step in (2, 4, 6, 8):
        where = ckpt.iter_dir(tmp_path, step)
        ckpt.write_driver_state(where, ckpt.DriverState.capture(step, {"position": step}))
        ckpt.mark_latest(tmp_path, where)
    ckpt.iter_dir(tmp_path, 5).mkdir()   # half-written by a killed run: older than the kept ones, so it goes
    ckpt.iter_dir(tmp_path, 9).mkdir()   # newer than every complete one: left alone
    (tmp_path / "iter_notes").mkdir()    # not a checkpoint name: never touched
    assert ckpt.prune(tmp_path, keep=4) == []
    gone = ckpt.prune(tmp_path, keep=2)
    assert [p.name for p in gone] == ["iter_0000002", "iter_0000004", "iter_0000005"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000006", "iter_0000008", "iter_0000009",
                                                          "iter_notes", "latest"]
    (tmp_path / "latest").write_text("iter_0000006")  # latest names an older one (set by hand): it stays
    assert ckpt.prune(tmp_path, keep=1) == [] and ckpt.find_latest(tmp_path).name == "iter_0000006"


def test_driver_rng_round_trips():
    import random

    state = ckpt.DriverState.capture(1, {})
    want = (random.random(), torch.rand(1).item())
    ckpt.DriverState(**json.loads(json.dumps(state.__dict__))).restore_rng()
    assert (random.random(), torch.rand(1).item()) == want


def test_read_metrics_keeps_the_last_row_of_a_step(tmp_path):
    (tmp_path / METRICS_FILE).write_text('{"step": 0, "x": 1}\n{"step": 1, "x": 2}\n{"step": 1, "x": 3}\n')
    assert read_metrics(tmp_path / METRICS_FILE) == [{"step": 0, "x": 1}, {"step": 1, "x": 3}]


def test_wandb_goes_offline_without_a_key(monkeypatch):
    from rlrun.metrics import wandb_mode

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert (wandb_mode("online"), wandb_mode("offline"), wandb_mode("disabled")) == ("offline", "offline", "disabled")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode("online") == "online"


def test_logger_writes_rows_and_the_plot(tmp_path):
    from rlrun.metrics import PLOT_FILE, MetricsLogger, plot

    cfg = load(["logging.wandb.mode=disabled", "logging.progress=false"])
    log = MetricsLogger(tmp_path, cfg, total=3)
    for step in range(3):
        log.log(step, {"rollout/reward_mean": step / 2, "rollout/response_len_mean": 1.0})
    log.close()
    rows = read_metrics(tmp_path / METRICS_FILE)
    assert [r["rollout/reward_mean"] for r in rows] == [0.0, 0.5, 1.0]
    assert plot(tmp_path) == tmp_path / PLOT_FILE and (tmp_path / PLOT_FILE).stat().st_size > 1000


def test_a_row_cut_short_is_not_read_and_a_resumed_logger_cuts_it_off(tmp_path):
    """A reader polling during a run can see a row's first bytes only, and a SIGKILL mid-write leaves them for good
    (tests/integration/test_resume.py's poll hit the first case): neither is a row. The resumed run's logger cuts
    the torn bytes before appending, so its first row does not glue onto them."""
    from rlrun.config import load
    from rlrun.metrics import MetricsLogger

    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x": 2}\n{"step": 2, "x"')
    assert read_metrics(path) == [{"step": 0, "x": 1}, {"step": 1, "x": 2}]
    log = MetricsLogger(tmp_path, load(["logging.progress=false", "logging.wandb.mode=disabled"]), total=3, start=2)
    log.log(2, {"x": 3})
    log.close()
    assert path.read_text().endswith('{"step": 1, "x": 2}\n{"step": 2, "x": 3.0}\n')
    assert read_metrics(path)[-1] == {"step": 2, "x": 3.0}
    path.write_text('{"step": 0, "x": 1}\nnot json\n')
    with pytest.raises(ValueError):  # a complete row that is not JSON is an error, never skipped
        read_metrics(path)
