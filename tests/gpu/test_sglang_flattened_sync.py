"""The colocated weight sync (rollout.weight_sync=tensor) into the real SGLang (0.5.16) with flattened IPC buckets:
the trainer's push (rlrun.launch.train_group.push_state -> rlrun.rollout.transports.tensor -> push_tensors) hands
the engine one CUDA IPC handle per bucket (SGLang's load_format="flattened_bucket", rlrun.rollout.weights
.serialize_ipc_flattened) instead of one per tensor, and stages the next bucket while the engine loads the previous
one. A random Qwen3-0.6B-shaped state (real vocab 151,936 unless RLRUN_FLAT_VOCAB says otherwise, bf16, 1.19 GB
with the tied lm_head not sent) goes to an SGLang engine on the same GPU; the engine's log-probs then match
transformers' on the pushed weights (LOGPROB_TOL, see test_sglang_engine), and the bandwidth of both forms is
printed (the per-tensor form first, on other weights, so that only the flattened push can explain the match).

Run on the lent GPU with the kit staged (tools/device/sglang.sh, ITEMS=flat); skips where SGLang cannot be
imported."""
import importlib.util
import os
import statistics
import time

import pytest
import requests
import torch

from test_sglang_engine import _check_matches, _model, _save

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                 reason="needs SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PUSHES = 3  # per form; the median is printed (the first push of a form also opens the engine's handles)


def _cfg(tmp):
    from rlrun.config import load

    return load(["hardware=h100", "model=qwen3-0.6b", f"model.vocab_size={os.environ.get('RLRUN_FLAT_VOCAB', 151936)}",
                 "checkpoint.random_init=true", "rollout.engine=sglang", "train.gpus_per_node=1",
                 "rollout.offload=true", "rollout.mem_fraction_static=0.3", f"run.output_dir={tmp}",
                 "+rollout.sglang.attention_backend=triton", "+rollout.sglang.sampling_backend=pytorch"])


def _push(cfg, url, model, version, flattened):
    from rlrun.config.kinds import ENGINES
    from rlrun.launch.train_group import push_state

    state = {n: p.detach() for n, p in model.state_dict().items()}
    out = push_state(state, [url], transport="tensor", version=version,
                     bucket_bytes=cfg.rollout.weight_sync_bucket_mb << 20, engine_dtype=None,
                     device=torch.device("cuda", 0), copies=1, tied=("lm_head.weight",),
                     flattened=flattened)
    assert requests.get(f"{url}/model_info", timeout=30).json()["weight_version"] == version
    return out["bytes"], out["seconds"]


def test_flattened_ipc_push_of_a_qwen3_06b_state_matches_transformers(tmp_path):
    from rlrun.rollout.engines.sglang.engine import SGLangEngine

    cfg = _cfg(tmp_path)
    _save(cfg, 0, tmp_path / "m0")  # the engine's init (its model is freed here)
    torch.cuda.empty_cache()
    engine = SGLangEngine.from_config(cfg, rank=0, gpus=[0], log_dir=tmp_path, model_path=str(tmp_path / "m0"))
    engine.start(timeout_s=420)
    try:
        rates = {}
        for flattened, seed in ((False, 2), (True, 1)):  # the flattened form last: the log-probs check it
            model = _model(cfg, seed)
            runs = [_push(cfg, engine.url, model, f"{seed}.{k}", flattened) for k in range(PUSHES)]
            nbytes, seconds = runs[0][0], statistics.median(s for _, s in runs)
            rates[flattened] = nbytes / seconds / 1e9
            print(f"SGLANG tensor push ({'flattened_bucket' if flattened else 'per-tensor handles'}): "
                  f"{nbytes / 1e9:.3f} GB in {seconds:.3f} s median of {PUSHES} ({rates[flattened]:.1f} GB/s; "
                  f"all: {', '.join(f'{s:.3f}' for _, s in runs)} s; bucket {cfg.rollout.weight_sync_bucket_mb} MiB)")
        gap, _ = _check_matches(engine.url, model)
        print(f"SGLANG after the flattened push: max |logprob - transformers| = {gap:.4f}; flattened / per-tensor "
              f"= {rates[True] / rates[False]:.1f}x")
    finally:
        engine.stop()
