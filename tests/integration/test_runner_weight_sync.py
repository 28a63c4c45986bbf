"""The runner's weight sync, per transport, through short `model=tiny hardware=cpu` runs (embedded
Ray, trainer ranks and hf engines as Ray actors, the real sglang-router):

  tensor       colocated (the cpu profile's default, auto): shared-memory payloads from the trainer rank
  distributed  disaggregated (auto): a gloo broadcast from the trainer rank to the engines
  disk         rollout.weight_sync=disk: the safetensors file, loaded by every engine
  delta        rollout.weight_sync=delta: a full version, then only the changed bytes, pulled into the engine's local
               checkpoint (the second push is a delta on the first)

After every push the runner makes, an independent check (not the runner's own fingerprint): the
sha256 of every pushed engine's weights equals the sha256 of the trainer's state, and every engine
reports the pushed version. Restarts: an engine killed during the rollout is brought to the current
weights by the trainer (tensor transport); one killed while the trainer trains is held out of the
router until the block's sync, which includes it.

The runs share one Ray session (the module's ray_cpu: the runner reuses a caller's connection and leaves it
connected), so each pays for its actors, not for starting and stopping a Ray cluster; a run's own embedded
cluster and its teardown are the default job's test (tests/integration/test_runner.py).
"""
from __future__ import annotations

import json
import sys
import time

import pytest
import ray

from rlrun import runner
from rlrun.parts.rollout_side import RolloutSide
from rlrun.parts.weight_sync import WeightSync
from rlrun.config import load
from rlrun.config.kinds import TRANSPORTS, TransportKind
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.launch.train_group import TrainGroup
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow, pytest.mark.usefixtures("ray_cpu")]


def _run(tmp_path, *extra):
    overrides = [f"run.output_dir={tmp_path}", "rollout.num_rollout=2", "rollout.rollout_batch_size=4",
                 "logging.wandb.mode=disabled", "logging.progress=false", *extra]
    cfg = load(overrides)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, overrides)
    return cfg, plan, run_dir, runner.run(cfg, plan, run_dir)


@pytest.fixture
def pushes(monkeypatch):
    """Every push the runner makes, with the trainer's and the engines' sha256 and versions after it."""
    seen = []
    real = WeightSync.push

    def push(self, version, urls, want=None, resume=True, drain=False):
        real(self, version, urls, want, resume, drain)
        seen.append({"transport": self.plan.weight_sync, "version": version, "urls": list(urls),
                     "trainer": self.trainer.export_weights(None), "engines": self.engines.checksums("sha256", urls),
                     "versions": self.engines.versions(urls)})

    monkeypatch.setattr(WeightSync, "push", push)
    return seen


def _check(pushes, transport, versions):
    assert [p["version"] for p in pushes] == versions
    for p in pushes:
        assert p["transport"] == transport
        assert set(p["engines"].values()) == {p["trainer"]}, p  # exactly the trainer's weights
        assert set(p["versions"].values()) == {str(p["version"])}


@pytest.mark.parametrize("transport, extra", [
    ("tensor", []),
    ("distributed", ["train.colocate=false", "rollout.num_gpus=2"]),
    ("disk", ["rollout.weight_sync=disk"]),
    ("delta", ["rollout.weight_sync=delta"]),
])
def test_each_transport_brings_every_engine_to_the_trainers_weights(tmp_path, pushes, transport, extra):
    cfg, plan, run_dir, summary = _run(tmp_path, *extra)
    assert plan.weight_sync == transport and summary["steps"] == 2
    assert ray.is_initialized()  # the caller's connection is still the caller's
    _check(pushes, transport, [1, 2])  # a fresh start pushes nothing: the engines loaded the trainer's init
    assert all(len(p["urls"]) == plan.num_engines for p in pushes)
    rows = read_metrics(run_dir / METRICS_FILE)
    speed = [r.get("perf/weight_sync_gb_per_s") for r in rows]
    assert all(r["time/weight_sync_s"] > 0 for r in rows)
    assert speed == [None, None] if TRANSPORTS[transport].file else all(s > 0 for s in speed)
    # where each push's time went (rlrun.rollout.engines.group.Phases): disjoint parts of the push, so within the step's
    # weight-sync phase
    phases = {"tensor": {"pause", "stage", "exchange", "wait", "resume"},
              "distributed": {"pause", "group", "stage", "broadcast", "resume"}}.get(transport, set())
    # the engines' requests, posted to answered in the posting threads: they overlap staging and cover the wait (up to
    # the future's hand-over, which the wait also counts: 0.4 ms seen here, so not compared)
    load = {"load"} if transport == "tensor" else set()
    # the driver's side (rlrun.parts.weight_sync.WeightSync.push): the drain before (the sync loop's pushes flush), the
    # trainer call beyond its push (memory transports), the verification after; disjoint from the rank's parts
    driver = {"drain", "verify"} | ({"call"} if phases else set())
    for r in rows:
        got = {k[len("weight_sync/"):-len("_s")] for k in r if k.startswith("weight_sync/")}
        assert got == phases | load | driver and all(r[f"weight_sync/{p}_s"] >= 0 for p in phases | driver)
        assert r["weight_sync/verify_s"] > 0 and r["weight_sync/drain_s"] > 0
        assert sum(r[f"weight_sync/{p}_s"] for p in phases | driver) <= r["time/weight_sync_s"]
        if load:
            assert 0 < r["weight_sync/load_s"] <= r["time/weight_sync_s"] - r["weight_sync/pause_s"]
    if transport == "delta":  # the trainer rank kept its snapshot between the pushes: the second is a delta on the first
        meta = [json.loads((run_dir / "weight_sync" / f"weight_v{v:06d}" / "model.safetensors.index.json").read_text())
                ["metadata"] for v in (1, 2)]
        assert "delta_encoding" not in meta[0] and meta[1]["delta_encoding"] == "xor"
        assert meta[1]["base_version"] == "000001" and meta[0]["stream"] == meta[1]["stream"]
        # each push's counts in its step's row (the publish's, read back from LATEST by the engines' end)
        written = [sum(f.stat().st_size for f in (run_dir / "weight_sync" / f"weight_v{v:06d}").iterdir()
                       if not f.name.endswith(".json")) for v in (1, 2)]
        assert [r["delta/full"] for r in rows] == [1.0, 0.0] and [r["delta/bytes"] for r in rows] == written
        assert rows[0]["delta/changed_frac"] == 1.0 and 0 < rows[1]["delta/changed_frac"] < 1
    print(f"\n{transport}: time/weight_sync_s {[round(r['time/weight_sync_s'], 4) for r in rows]}")


# Adding a transport is one module: this one is registered from the test, and nothing else in rlrun changes. Its
# tensors travel in the HTTP body (serialized: no shared memory, no NCCL, any host reaches any engine); auto never
# picks it. TrainGroup sends the spec to the trainer's process, and Ray ships this module's functions by value
# (the test module is not importable there; a plugin package would be).
def _body_push(named, urls, *, version, bucket_bytes, prepare, copies=1, backend="gloo", resume=True,
               timeout_s=180.0, engine_env=None, flush_cache=True, keep=None, flattened=False, phases=None) -> int:
    from rlrun.rollout.engines.group import push_tensors

    return push_tensors(urls, named, version, transport="serialized", bucket_bytes=bucket_bytes, prepare=prepare,
                        copies=copies, resume=resume, timeout_s=timeout_s, flush_cache=flush_cache, phases=phases)


HTTP_BODY = TransportKind("http_body", auto=lambda cfg: False, rules=lambda cfg: iter(()), push=_body_push,
                          metrics=lambda nbytes, seconds: {"perf/http_body_mb": nbytes / 2**20})


def test_a_transport_registered_here_syncs_the_default_cpu_job(tmp_path, pushes):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with TRANSPORTS.registered(HTTP_BODY):
        cfg, plan, run_dir, summary = _run(tmp_path, "rollout.weight_sync=http_body")
    assert "http_body" not in TRANSPORTS  # registered for the block only
    assert plan.weight_sync == "http_body" and summary["steps"] == 2
    _check(pushes, "http_body", [1, 2])  # every engine holds exactly the trainer's weights after each push
    rows = read_metrics(run_dir / METRICS_FILE)
    # its own metric: every parameter of the tiny model in fp32 (the tied lm_head is not sent), once per push
    assert [r["perf/http_body_mb"] for r in rows] == [pytest.approx(plan.params_total * 4 / 2**20)] * 2
    assert all(r["train/train_rollout_logp_abs_diff"] < 1e-5 for r in rows)  # fp32 on the CPU; measured ~1e-7


@pytest.fixture
def sources(monkeypatch):
    """Each push's url -> the trainer ranks whose payloads that engine got (TrainGroup.push_weights' record)."""
    seen, real = [], TrainGroup.push_weights

    def push_weights(self, urls, **how):
        out = real(self, urls, **how)
        if urls:
            seen.append(out["sources"])
        return out

    monkeypatch.setattr(TrainGroup, "push_weights", push_weights)
    return seen


def test_colocated_dp2_each_engine_gets_the_payload_of_the_rank_on_its_gpu(tmp_path, pushes, sources, capfd):
    """DP=2 with two engines colocated (the torch backend, gloo; two hf engines): each engine is pushed by the trainer
    rank on its own slot, from that rank's copy (gathered per engine: TransportKind.gathered), at once with the other;
    every engine then holds exactly the trainer's weights."""
    cfg, plan, run_dir, summary = _run(tmp_path, "train.gpus_per_node=2")
    assert plan.weight_sync == "tensor" and plan.num_engines == 2 and plan.trainer_gpus == 2 and summary["steps"] == 2
    _check(pushes, "tensor", [1, 2])
    on = {(s.role, s.rank): s.gpu for s in plan.placement}
    assert on == {("trainer", 0): 0, ("trainer", 1): 1, ("engine", 0): 0, ("engine", 1): 1}
    # engine i (pushes list the urls in engine order) got rank i's payload: the rank on its slot
    assert sources == [{url: [i] for i, url in enumerate(p["urls"])} for p in pushes]
    assert "gathered per engine" in capfd.readouterr().err  # said once, in the run's log


def _wait(what, until, timeout_s=90.0):
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_restarts_get_the_current_weights_and_never_newer_ones(tmp_path, pushes, sources, monkeypatch):
    """Two colocated engines (tensor transport). Rollout 1: engine 0 is killed before generating;
    the monitor restarts it and the trainer pushes it version 1, so every sample of the rollout
    carries version 1. Then engine 1 is killed while the trainer trains (rollout 1's block); its
    replacement is held out of the router with no push (a push now would be weights the other
    engine does not serve) until the block's sync to version 2 pushes both engines and admits it;
    rollout 2's samples all carry version 2."""
    state = {}
    real_collect, real_step = RolloutSide.collect, TrainGroup.train_step

    def collect(self, rollout_id, sampling):
        state["run"] = self
        if rollout_id == 1:
            ray.kill(self.engines.engines[0].actor)
            _wait("engine 0's restart", lambda: self.engines.restarts == 1)
            state["resynced"] = self.engines.urls[0]
        if rollout_id == 2:
            state["workers"] = set(self.router.workers())
        samples, kept, info = real_collect(self, rollout_id, sampling)
        if rollout_id >= 1:
            assert {s.weight_version for s in samples} == {rollout_id}
        return samples, kept, info

    def train_step(self, batch):
        run = state["run"]
        if run.engines.restarts == 1 and "held" not in state:  # rollout 1's block
            ray.kill(run.engines.engines[1].actor)
            _wait("engine 1's restart", lambda: run.engines.held)
            state["held"], state["pushes_before"] = run.engines.held[0], len(pushes)
            assert state["held"] not in run.router.workers()  # no traffic before the sync
        return real_step(self, batch)

    monkeypatch.setattr(RolloutSide, "collect", collect)
    monkeypatch.setattr(TrainGroup, "train_step", train_step)
    cfg, plan, run_dir, summary = _run(tmp_path, "train.gpus_per_node=2", "rollout.num_rollout=3")
    assert plan.weight_sync == "tensor" and plan.num_engines == 2 and summary["steps"] == 3
    # the block syncs (versions 1, 2, 3, every engine) and the resync of engine 0 (version 1, to it alone)
    resync = [p for p in pushes if p["urls"] == [state["resynced"]]]
    _check(resync, "tensor", [1])
    _check([p for p in pushes if p not in resync], "tensor", [1, 2, 3])
    # the held engine got nothing until its block's sync, which pushed it version 2 with the other engine
    assert state["pushes_before"] == 2 and not any(state["held"] in p["urls"] for p in pushes[:2])
    assert pushes[2]["version"] == 2 and sorted(pushes[2]["urls"]) == sorted([state["resynced"], state["held"]])
    assert state["workers"] == {state["resynced"], state["held"]}  # admitted after the sync
    # gathered per engine: the restarted engine 0 alone got its payload from rank 0 (on its slot), rank 1 sent nothing
    assert sources[pushes.index(resync[0])] == {state["resynced"]: [0]}
