"""The colocated weight sync (rollout.weight_sync=tensor) into the real SGLang (0.5.16) with flattened IPC buckets:
the trainer's push (rlrun.launch.train_group.push_state -> rlrun.rollout.transports.tensor -> push_tensors) hands
the engine one CUDA IPC handle per bucket (SGLang's load_format="flattened_bucket", rlrun.rollout.weights
.serialize_ipc_flattened) instead of one per tensor, and stages the next bucket while the engine loads the previous
one. A random Qwen3-0.6B-shaped state (real vocab 151,936 unless RLRUN_FLAT_VOCAB says otherwise, bf16, 1.19 GB
with the tied lm_head not sent) goes to an SGLang engine on the same GPU; the engine's log-probs then match
transformers' on the pushed weights (LOGPROB_TOL, see test_sglang_engine), and the bandwidth of both forms is
printed (the per-tensor form first, on other weights, so that only the flattened push can explain the match), with
each push's phases (rlrun.rollout.engines.group.Phases), for bucket sizes BUCKETS_MB, next to SGLang alone (one
request of per-tensor handles, the way SGLang's docs push weights): where rlrun's push loses time against it.

Run on the lent GPU with the kit staged (tools/device/sglang.sh, ITEMS=flat); skips where SGLang cannot be
imported."""
import importlib.util
import os
import statistics
import time

import pytest
import requests
import torch

from test_sglang_engine import TEST_ARGS, _check_matches, _model, _save

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                 reason="needs SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PUSHES = 3  # per form; the median is printed (the first push of a form also opens the engine's handles)
BUCKETS_MB = (256, 512, 1024, 2048)  # the flattened form's bucket sizes measured (2048: the whole state in one bucket)


def _cfg(tmp):
    from rlrun.config import load

    return load(["hardware=h100", "model=qwen3-0.6b", f"model.vocab_size={os.environ.get('RLRUN_FLAT_VOCAB', 151936)}",
                 "checkpoint.random_init=true", "rollout.engine=sglang", "train.gpus_per_node=1",
                 "rollout.offload=true", "rollout.mem_fraction_static=0.3", f"run.output_dir={tmp}",
                 *TEST_ARGS])


def _push(url, model, version, flattened, bucket_mb):
    from rlrun.config.kinds import ENGINES
    from rlrun.launch.train_group import push_state

    state = {n: p.detach() for n, p in model.state_dict().items()}
    # as WeightSync pushes to SGLang: no trainer fingerprint (its engines cannot be asked for theirs)
    out = push_state(state, [url], transport="tensor", version=version, bucket_bytes=bucket_mb << 20,
                     engine_dtype=None, device=torch.device("cuda", 0), copies=1, tied=("lm_head.weight",),
                     flattened=flattened, fingerprint=ENGINES["sglang"].checksums)
    assert requests.get(f"{url}/model_info", timeout=30).json()["weight_version"] == version
    return out


def _sglang_alone(url, model):
    """SGLang's own path as its docs use it: one /update_weights_from_tensor with a
    CUDA IPC handle per tensor of the model's own storages; no pause, no fingerprint, no bucketing. The request's
    seconds only (serialization before it)."""
    from rlrun.rollout import api
    from rlrun.rollout import weights as W

    named = [(n, p.detach()) for n, p in model.state_dict().items() if n != "lm_head.weight"]
    payload, keep = W.serialize_ipc(named)
    body = api.update_weights_from_tensor_body([payload], "alone", flush_cache=True)
    t0 = time.perf_counter()
    requests.post(f"{url}/update_weights_from_tensor", json=body, timeout=120).raise_for_status()
    seconds = time.perf_counter() - t0
    del keep
    return sum(t.numel() * t.element_size() for _, t in named), seconds


def _line(what, runs):
    """One printed row: the median push of `runs` (push_state results) with its phases."""
    med = sorted(runs, key=lambda o: o["seconds"])[len(runs) // 2]
    phases = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(med["phases"].items()))
    every = ", ".join(f"{o['seconds']:.3f}" for o in runs)
    print(f"SGLANG tensor push ({what}): {med['bytes'] / 1e9:.3f} GB in {med['seconds']:.3f} s median of {len(runs)} "
          f"({med['bytes'] / med['seconds'] / 1e9:.1f} GB/s; all: {every} s; phases ms: {phases})")
    return med["bytes"] / med["seconds"] / 1e9


def test_flattened_ipc_push_of_a_qwen3_06b_state_matches_transformers(tmp_path):
    from rlrun.rollout.engines.sglang.engine import SGLangEngine

    cfg = _cfg(tmp_path)
    _save(cfg, 0, tmp_path / "m0")  # the engine's init (its model is freed here)
    torch.cuda.empty_cache()
    engine = SGLangEngine.from_config(cfg, rank=0, gpus=[0], log_dir=tmp_path, model_path=str(tmp_path / "m0"))
    engine.start(timeout_s=420)
    try:
        alone = _model(cfg, 3)
        runs = [_sglang_alone(engine.url, alone) for _ in range(PUSHES)]
        nbytes, seconds = runs[0][0], statistics.median(s for _, s in runs)
        print(f"SGLANG tensor push (SGLang alone: one request, a handle per tensor): {nbytes / 1e9:.3f} GB in "
              f"{seconds:.3f} s median of {PUSHES} ({nbytes / seconds / 1e9:.1f} GB/s)")
        bucket = cfg.rollout.weight_sync_bucket_mb
        model = _model(cfg, 2)
        per_tensor = _line(f"per-tensor handles, bucket {bucket} MiB",
                           [_push(engine.url, model, f"2.{k}", False, bucket) for k in range(PUSHES)])
        rates = {}
        model = _model(cfg, 1)  # the flattened form last, on other weights: only it can explain the match below
        for mb in BUCKETS_MB:
            rates[mb] = _line(f"flattened_bucket, bucket {mb} MiB",
                              [_push(engine.url, model, f"1.{mb}.{k}", True, mb) for k in range(PUSHES)])
        gap, _ = _check_matches(engine.url, model)
        print(f"SGLANG after the flattened push: max |logprob - transformers| = {gap:.4f}; flattened ({bucket} MiB, "
              f"the default) / per-tensor = {rates[bucket] / per_tensor:.1f}x; best bucket "
              f"{max(rates, key=rates.get)} MiB; SGLang alone {nbytes / seconds / 1e9:.1f} GB/s")
    finally:
        engine.stop()
