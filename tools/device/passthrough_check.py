"""train.megatron on the GPU: one MegatronBackend per process, a few train steps on a synthetic batch, JSON out.

    python tools/device/passthrough_check.py [OVERRIDE ...]     # prints one JSON line

Reports the peak GPU memory of the train steps (torch.cuda.max_memory_allocated, after init), the mean step time of
steps 2.. (the first builds the optimizer state), the grad norms, the inner optimizer's class and where its state lives,
and the TransformerConfig / OptimizerConfig / DDP config values of every train.megatron field (what megatron-core
got). tests/gpu/test_gpu_megatron_passthrough.py runs it with and without train.megatron.optimizer_cpu_offload and with a
MoE dispatcher / token-drop setting.
"""
from __future__ import annotations

import json
import sys
import time

import torch


def batch(vocab: int, n: int, length: int, seed: int):
    from rlrun.train.base import TrainBatch

    g = torch.Generator().manual_seed(seed)
    tokens = [torch.randint(0, vocab, (length,), generator=g) for _ in range(n)]
    start = length // 4
    mask = [torch.ones(length - start) for _ in range(n)]
    adv = [torch.full((length - start,), float(torch.randn(1, generator=g))) for _ in range(n)]
    return TrainBatch(tokens=tokens, response_start=[start] * n, loss_mask=mask, advantages=adv)


def main(overrides: list[str], steps: int = 4) -> dict:
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend

    cfg = load(overrides)
    be = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=steps)
    be.init()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, grad_norms = [], []
    for i in range(steps):
        b = batch(cfg.model.vocab_size, 8, 512, seed=i)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = be.train_step(b)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        grad_norms.append(float(out["train/grad_norm"]))
    inner = be._inner_optimizers()[0].optimizer
    states = [t for st in inner.state.values() for t in st.values() if torch.is_tensor(t) and t.numel() > 1]
    devices = sorted({str(t.device.type) for t in states})
    fields = {}
    from megatron.core.transformer.enums import AttnBackend  # noqa: F401 (enums print by name)
    # the OptimizerConfig from the inner DistributedOptimizer: a ChainedOptimizer need not carry one
    opt_config = be._inner_optimizers()[0].config
    for k in cfg.train.megatron:
        for obj in (be.tconfig, opt_config, be.model.ddp_config):
            if hasattr(obj, k):
                v = getattr(obj, k)
                fields[k] = v.name if hasattr(v, "name") else v
                break
    return {"overrides": overrides, "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "step_s": sum(times[1:]) / max(len(times) - 1, 1), "step_times": times, "grad_norms": grad_norms,
            "optimizer": type(inner).__name__, "state_devices": devices, "fields": fields,
            "params": sum(p.numel() for p in be.model.parameters())}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), default=str))
