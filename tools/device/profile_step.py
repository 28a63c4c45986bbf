"""Where a megatron-backend train step spends its GPU time (torch.profiler, top kernels) and
how it splits between forward+backward and the optimizer step.

    python tools/device/profile_step.py qwen3-1.7b 4096 [plain|fastops|fused|nokernels|all] [table]

Variants: plain = megatron-core's own fallbacks, fastops = rlrun.train.megatron.fast_ops,
fused = compiled SwiGLU/bias-dropout-add, nokernels = fastops without rlrun.train.megatron.kernels
and .rope (torch's RMSNorm and SwiGLU ops, megatron-core's THD rope), all = fastops + those kernels
(the backend's default). "fwd_bwd_host" is when the forward+backward call returned, before the GPU
finished: close to fwd_bwd means the host (Python, or a host sync) sets the pace.
PROFILE_SET="k=v ..." adds config overrides (e.g. train.cuda_graphs=true optim.state_dtype=bf16).
"""
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from megatron_mfu import overrides  # noqa: E402


def main(name="qwen3-1.7b", seq=4096, variant="all", table=""):
    from rlrun.train import megatron_backend
    from rlrun.train.megatron import kernels, model as mm, rope
    megatron_backend.FAST_OPS = variant in ("fastops", "nokernels", "all")
    mm.TORCH_COMPILE_FUSIONS = variant == "fused"
    kernels.ENABLED = rope.ENABLED = variant == "all"
    from rlrun.config import load
    from rlrun.train.base import TrainBatch
    from rlrun.train.megatron_backend import MegatronBackend
    cfg = load(overrides(name, int(seq), int(seq), extra=tuple(os.environ.get("PROFILE_SET", "").split())))
    be = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=100)
    be.init()
    ids = torch.randint(0, cfg.model.vocab_size, (int(seq),))
    batch = TrainBatch(tokens=[ids], response_start=[1], loss_mask=[torch.ones(int(seq) - 1)],
                       advantages=[torch.ones(int(seq) - 1)])
    phases = {"fwd_bwd": [], "fwd_bwd_host": [], "opt_step": []}
    run, step = be._run, be.opt.step

    def timed(key, fn):
        def wrapper(*a, **k):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            r = fn(*a, **k)
            if key == "fwd_bwd":
                phases["fwd_bwd_host"].append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            phases[key].append(time.perf_counter() - t0)
            return r
        return wrapper
    be._run, be.opt.step = timed("fwd_bwd", run), timed("opt_step", step)
    for _ in range(5):
        be.train_step(batch)
    torch.cuda.reset_peak_memory_stats()
    step_s = []
    for _ in range(3):
        t0 = time.perf_counter()
        be.train_step(batch)
        step_s.append(time.perf_counter() - t0)
    print("PHASES", variant, f"train_step {statistics.median(step_s):.4f} s", {k: round(statistics.median(v[2:]), 4) for k, v in phases.items() if v[2:]},
          f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    if not table:
        be.shutdown()
        return
    kinds = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=kinds) as prof:
        be.train_step(batch)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=28, max_name_column_width=60))
    be.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
