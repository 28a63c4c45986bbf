"""loop.run's control flow against a recording stand-in for the run's parts (rlrun.parts).

The real parts need Ray, engines and a router (tests/integration/test_runner.py runs them); here
one stand-in with every part's methods records what the loop asks for, so that the order of
phases, the log-prob decisions and the eval/save intervals are checked in milliseconds.
"""
from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from rlrun.loops import sync_loop as loop
from rlrun.config import ConfigError, load
from rlrun.config.plan import make_plan
from rlrun.data import Sample
from rlrun.parts import Parts
from rlrun.rollout.handle import PolicyVersion


class _Trainer:
    def __init__(self, calls):
        self.calls = calls

    def compute_log_probs(self, batch, which):
        self.calls.append(("log_probs", which, len(batch)))
        return [torch.full((int(m.numel()),), -1.0) for m in batch.loss_mask]

    def compute_values(self, batch):
        self.calls.append(("values", len(batch)))
        return [torch.full((int(m.numel()),), 0.25) for m in batch.loss_mask]

    def train_step(self, batch):
        self.calls.append(("train", len(batch), batch.old_logp is not None, batch.ref_logp is not None))
        if batch.returns is not None:
            self.calls.append(("returns", [float(x) for x in batch.returns], [float(x) for x in batch.values]))
        return {"train/loss": float(len(self.calls))}

    def offload(self):
        self.calls.append(("offload",))

    def onload(self):
        self.calls.append(("onload",))

    def start_profile(self):
        self.calls.append(("start_profile",))

    def stop_profile(self, rollout_id):
        self.calls.append(("stop_profile", rollout_id))
        return []


class _Prompts:
    def state_dict(self):
        return {"position": 0}

    def load_state_dict(self, state):
        pass


class _Run:
    """Every part at once (their method names do not collide); `parts()` hands it to a loop."""

    def __init__(self, overrides, start=0):
        self.cfg = load(overrides)
        self.plan = make_plan(self.cfg)
        self.calls, self.start = [], start
        self.trainer = _Trainer(self.calls)
        self.logged, self.recorded = [], []
        self.prompts = _Prompts()
        self.versions, self.engines = PolicyVersion(), self  # the async loop's gate; abort_all below
        self.check_stop = lambda: None

    def parts(self) -> Parts:
        return Parts(cfg=self.cfg, plan=self.plan, rollout=self, trainer=self.trainer, weights=self, offload=self,
                     checkpoints=self, evaluator=self, metrics=self, check_stop=lambda: self.check_stop())

    def restore(self):
        self.calls.append(("restore",))
        return SimpleNamespace(next_rollout=self.start, data_state={}) if self.start else None

    def sync(self, version, only_if_stale=False):
        pass

    def push_all(self, version, want=None, resume=True, flushed=False):
        self.calls.append(("push_all", version))

    def abort_all(self):
        pass

    def open(self, start):
        pass

    def record(self, rollout_id, samples, kept):
        self.recorded.append((rollout_id, len(samples), len(kept)))

    @contextmanager
    def profiling(self, rollout_id):
        yield

    def collect(self, rollout_id, sampling):
        r = self.cfg.rollout
        samples = [Sample(prompt="12", prompt_tokens=[5, 6], response="2", response_tokens=[6], loss_mask=[1],
                          reward=float(i % 2), rollout_logprobs=[-0.5], group_id=i // r.n_samples_per_prompt)
                   for i in range(r.rollout_batch_size * r.n_samples_per_prompt)]
        self.calls.append(("collect", rollout_id, sampling.max_new_tokens))
        return samples, samples, {}

    @contextmanager
    def training(self, version, timer, push=True):
        yield
        self.calls.append(("sync", version))  # the weight sync ends the trainer's block

    def evaluate(self, rollout_id):
        self.calls.append(("eval", rollout_id))
        return {"eval/reward_mean": 0.5}

    def save(self, rollout_id, data_state):
        self.calls.append(("save", rollout_id))

    def latest(self):
        return ""

    def log(self, rollout_id, metrics):
        self.logged.append((rollout_id, metrics))

    def summary(self, checkpoint):
        return {"steps": len(self.logged)}


def test_one_step_per_rollout_trains_on_policy_and_saves_on_interval_and_at_the_end():
    r = _Run(["rollout.num_rollout=5", "checkpoint.save_interval=2", "eval.interval=3",
              "eval.datasets=[{name: x, path: x.jsonl, rm_type: exact_match}]"])
    assert loop.run(r.parts()) == {"steps": 5}
    kinds = [c[0] for c in r.calls]
    assert kinds[:5] == ["restore", "collect", "train", "sync", "collect"]
    assert "log_probs" not in kinds  # on-policy: the live log-probs are the old ones
    assert [c for c in r.calls if c[0] in ("eval", "save")] == [
        ("save", 1), ("eval", 2), ("save", 3), ("save", 4)]
    assert [c[2] for c in r.calls if c[0] == "collect"] == [1] * 5  # rollout.max_response_len of the CPU job
    row = r.logged[2][1]
    assert row["eval/reward_mean"] == 0.5 and row["rollout/reward_mean"] == 0.5 and "time/train_s" in row


def test_two_steps_per_rollout_need_old_log_probs_and_split_the_batch():
    r = _Run(["rollout.num_rollout=1", "train.num_steps_per_rollout=2", "algo.use_kl_loss=true",
              "algo.kl_loss_coef=0.01"])
    loop.run(r.parts())
    n = r.plan.samples_per_rollout
    assert ("log_probs", "actor", n) in r.calls and ("log_probs", "ref", n) in r.calls
    assert [c for c in r.calls if c[0] == "train"] == [("train", n // 2, True, True)] * 2
    assert r.logged[0][1]["train/loss"] == (5 + 6) / 2  # the mean over the two optimizer steps


def test_ppo_asks_the_critic_for_values_and_trains_it_on_the_returns():
    r = _Run(["rollout.num_rollout=1", "algo=ppo"])
    loop.run(r.parts())
    n = r.plan.samples_per_rollout
    kinds = [c[0] for c in r.calls]
    assert kinds == ["restore", "collect", "values", "train", "returns", "sync", "save"]
    assert r.calls[2] == ("values", n)
    # one response token, reward i % 2 on it, V = 0.25: A = r - V, returns = A + V = r
    _, returns, values = r.calls[4]
    assert returns == [float(i % 2) for i in range(n)] and values == [0.25] * n


def test_resume_starts_at_the_restored_rollout():
    r = _Run(["rollout.num_rollout=4"], start=3)
    loop.run(r.parts())
    assert [c[1] for c in r.calls if c[0] == "collect"] == [3]
    assert ("save", 3) in r.calls and [i for i, _ in r.logged] == [3]


def test_what_the_runner_cannot_do_is_a_config_problem():
    # the runner has no refusals of its own (runner.check_supported is gone): validate decides
    import rlrun.runner

    assert not hasattr(rlrun.runner, "check_supported")
    load(["algo=ppo"])  # the torch backend builds the critic
    with pytest.raises(ConfigError, match="trains a critic"):  # PPO on megatron: a config rule
        load(["algo=ppo", "hardware=h100", "train.backend=megatron"])
    # async training and partial rollouts run: rules.async_mode decides
    load(["train.async_train=true", "train.colocate=false", "rollout.num_gpus=1", "rollout.partial_rollout=true"])


class _SyncEngines:
    """One engine whose checksum becomes the trainer's ("abc") after a push, unless `broken`."""

    def __init__(self, held: str, broken: bool = False):
        self.held, self.broken, self.pushes, self.version = held, broken, [], "default"

    def got(self, version):
        self.pushes.append(str(version))
        self.version = str(version)
        if not self.broken:
            self.held = "abc"

    def sync(self, push):
        push(["http://e0"])

    def index_of(self, url):
        return ["http://e0"].index(url)

    def drain(self, timeout_s, urls=None):  # the sync loop's push waits until the engines are idle (EngineGroup)
        self.drained = list(urls)

    def update_weights_from_disk(self, path, version, urls):
        self.got(version)

    def checksums(self, kind="sha256", urls=None):
        return {"http://e0": self.held}

    def versions(self, urls=None):
        return {"http://e0": self.version}


class _SyncTrainer:
    """disk: exports "abc"; tensor/distributed: pushes itself and reports fingerprint "abc"."""

    def __init__(self, engines):
        self.engines = engines

    def export_weights(self, path, transport=None, args=None):
        return "abc"

    def push_weights(self, urls, **how):
        import inspect

        from rlrun.launch.train_group import TrainGroup

        # what WeightSync passes must be what the real TrainGroup takes (a new push argument once reached only this
        # stand-in, and every real run failed at its first weight sync)
        inspect.signature(TrainGroup.push_weights).bind(None, urls, **how)
        if urls:
            self.engines.got(how["version"])
        return {"fingerprint": "abc", "bytes": 2_000_000, "seconds": 0.5}


def _sync_run(tmp_path, engines, *overrides):
    from rlrun.config.plan import make_plan
    from rlrun.parts.weight_sync import WeightSync
    from rlrun.rollout.handle import PolicyVersion

    cfg = load(list(overrides))
    engines.weight_dtype = lambda: "float32"
    return WeightSync(cfg, make_plan(cfg), tmp_path, _SyncTrainer(engines), engines, PolicyVersion())


@pytest.mark.parametrize("transport", ["tensor", "disk"])
def test_sync_pushes_only_to_stale_engines_and_verifies(tmp_path, transport):
    from rlrun.parts.weight_sync import WeightSyncError

    opt = f"rollout.weight_sync={transport}"
    fresh = _SyncEngines(held="abc")
    _sync_run(tmp_path, fresh, opt).sync(0, only_if_stale=True)
    assert fresh.pushes == []  # same init on both sides: nothing to send
    stale = _SyncEngines(held="old")
    r = _sync_run(tmp_path, stale, opt)
    r.sync(0, only_if_stale=True)
    assert stale.pushes == ["0"] and r.synced == (0, "abc") and r.versions.version == 0
    assert stale.drained == ["http://e0"]  # the sync loop's engines were idle and flushed before the push
    got = r.pop_metrics()
    # the driver's parts of the push (WeightSync.push): drained first, then the call (a memory transport), verified
    assert {k for k in got if k.startswith("weight_sync/")} == {
        "weight_sync/drain_s", "weight_sync/verify_s", *(["weight_sync/call_s"] if transport == "tensor" else [])}
    if transport == "tensor":  # 2 MB in 0.5 s
        assert {k: v for k, v in got.items() if k.startswith("perf/")} == {
            "perf/weight_sync_gb_per_s": pytest.approx(0.004), "perf/weight_sync_gb": 0.002}
    assert r.pop_metrics() == {}  # once
    with pytest.raises(WeightSyncError, match="weight sync to version 3"):
        _sync_run(tmp_path, _SyncEngines(held="old", broken=True), opt).sync(3)


def test_a_stop_request_whose_exception_was_lost_stops_the_loop_before_the_next_rollout():
    import signal

    from rlrun.runner import StopRequest
    stop = StopRequest()
    stop.check()  # nothing requested: no-op
    with pytest.raises(SystemExit) as raised:
        stop.handler(signal.SIGINT, None)
    assert raised.value.code == 130
    r = _Run(["rollout.num_rollout=5"])
    collected = []
    r.check_stop = lambda: stop.check() if len(collected) == 2 else None  # lost during rollout 1
    real_collect = r.collect
    r.collect = lambda rid, sampling: (collected.append(rid), real_collect(rid, sampling))[1]
    with pytest.raises(SystemExit) as raised:
        loop.run(r.parts())
    assert raised.value.code == 130 and collected == [0, 1]


def test_rollout_only_generates_and_logs_without_training():
    r = _Run(["rollout.num_rollout=2", "debug.rollout_only=true"])
    loop.run(r.parts())
    kinds = [c[0] for c in r.calls]
    assert kinds == ["restore", "collect", "collect", "save"]  # no log-probs, train or weight sync
    n = r.plan.samples_per_rollout
    assert r.recorded == [(0, n, n), (1, n, n)]  # every rollout is recorded
    assert "train/loss" not in r.logged[0][1] and r.logged[0][1]["rollout/reward_mean"] == 0.5
