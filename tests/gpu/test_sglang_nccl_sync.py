"""The disaggregated weight sync to the real SGLang (0.5.16): the trainer (this process, GPU 0) broadcasts over
NCCL to an SGLang engine on GPU 1 through rlrun.rollout.engines.group.broadcast_weights (/init_weights_update_group,
/update_weights_from_distributed with SGLang's flattened buckets, /destroy_weights_update_group), twice (a second
sync builds a new group), and the engine then generates with the pushed weights' log-probs.

Written after the disaggregated SGLang run on two H100s printed no rollout (2026-11-25, docs/benchmarks.md): the
trainer's group used other store keys than SGLang's init_custom_process_group, so NCCL's unique-id exchange never
met. The CPU test of the key layout is tests/unit/test_rollout_weights.py (a rank that joins as SGLang does); this
one checks the real server. Needs two GPUs and the kit (tools/device/sglang.sh, ITEMS=nccl); skips elsewhere.
Tolerance: test_sglang_engine.LOGPROB_TOL (bf16 rounding, see there)."""
import importlib.util
import time

import pytest
import torch

from test_sglang_engine import _cfg, _check_matches, _model, _save

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                 reason="needs SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)"),
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two GPUs: the trainer on GPU 0, the engine on GPU 1")]


@pytest.mark.parametrize("load_format", ["flattened_bucket", None])
def test_nccl_broadcast_from_the_trainer_to_an_sglang_engine(tmp_path, monkeypatch, load_format):
    from rlrun.config.kinds import ENGINES
    from rlrun.rollout.engines.group import broadcast_weights
    from rlrun.rollout.process import free_port
    from rlrun.rollout.engines.sglang.engine import SGLangEngine

    # This process is the trainer: it must run with the engines' NCCL settings (SGLang sets NCCL_CUMEM_ENABLE=0;
    # rlrun's trainer actors get it from the plan's env). With NCCL's default (cuMem on) here, the first broadcast
    # never completed (2026-11-28, two H100s: the 420 s watchdog); now check_nccl_env refuses that at once.
    monkeypatch.setenv("NCCL_CUMEM_ENABLE", ENGINES["sglang"].nccl_env["NCCL_CUMEM_ENABLE"])
    cfg = _cfg(tmp_path)
    _save(cfg, 0, tmp_path / "m0")
    engine = SGLangEngine.from_config(cfg, rank=0, gpus=[1], log_dir=tmp_path, model_path=str(tmp_path / "m0"))
    engine.start(timeout_s=420)
    try:
        for seed, version in ((3, "9"), (4, "10")):
            new = _model(cfg, seed)  # on GPU 0, the trainer's side
            named = [(n, p.detach()) for n, p in new.state_dict().items() if n != "lm_head.weight"]
            t0 = time.perf_counter()
            stats = broadcast_weights([engine.url], named, version, master_address="127.0.0.1",
                                      master_port=free_port(), backend="nccl", bucket_bytes=4 << 20,
                                      load_format=load_format, timeout_s=120,
                                      engine_env=dict(ENGINES["sglang"].nccl_env))
            dt = time.perf_counter() - t0
            assert stats["bytes"] == sum(t.numel() * t.element_size() for _, t in named)
            gap, _ = _check_matches(engine.url, new)
            print(f"SGLANG NCCL sync ({load_format}) v{version}: {stats['bytes'] / 1e6:.1f} MB in {dt:.3f} s "
                  f"({stats['gb_per_s']:.2f} GB/s in the broadcasts); then max gap {gap:.4f}")
    finally:
        engine.stop()
