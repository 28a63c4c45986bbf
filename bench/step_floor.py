"""Where the GPU time of one train step goes, by kernel kind, for the megatron backend and for
transformers + SDPA on the same shape, and the fastest step the shared kernels allow.

    python bench/step_floor.py --model qwen3-1.7b --seq 4096 [--set train.fp32_grads=false ...]

Both backends run the same matmuls (same shapes, bf16, cuBLAS) and the same flash attention, so
the smaller of the two backends' GEMM + attention time is a floor no implementation of this step
on this GPU goes under in bf16. `best possible speedup` = transformers' measured step / that floor:
the ratio megatron would reach with every other kernel (norms, rope, SwiGLU, casts, the optimizer)
and all CPU overhead gone. Issue 5's goal (1.3x) can only be met where this is well above 1.3.
Kernels are classified by name (cuBLAS: nvjet/gemm/cutlass; flash/fmha/cudnn sdpa: attention).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from megatron_mfu import MAKERS, flops_per_token, overrides  # noqa: E402

# first match wins: attention kernels are cutlass-based too, so they are tested first
KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("gemm", ("nvjet", "gemm", "cutlass", "xmma", "cublas", "splitk")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("softmax/CE", ("softmax", "cross_entropy", "logsumexp", "nll")),
    ("norm", ("rms", "norm")),
    ("copy/cast", ("copy", "cast", "convert", "cat")),
    ("reduce", ("reduce",)),
    ("elementwise", ("elementwise", "vectorized", "unrolled")),
)


def kind(name: str) -> str:
    n = name.lower()
    return next((k for k, keys in KINDS if any(x in n for x in keys)), "other")


def profile(step, steps: int = 2) -> tuple[dict[str, float], float, dict[str, float]]:
    """ms per step by kernel kind, the wall time per step under the profiler, ms per kernel name."""
    kinds = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=kinds) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps * 1e3
    out: dict[str, float] = {}
    names: dict[str, float] = {}
    for e in prof.events():
        # kernels only: a user annotation (torch's "Optimizer.step#AdamW.step" range) is also recorded
        # on the GPU track and would count its kernels twice
        if e.device_type == torch.autograd.DeviceType.CUDA and "#" not in e.name:
            ms = e.time_range.elapsed_us() / 1e3 / steps
            out[kind(e.name)] = out.get(kind(e.name), 0.0) + ms
            names[e.name] = names.get(e.name, 0.0) + ms
    return out, wall, names


def one(backend: str, args) -> dict:
    from rlrun.config import load
    cfg = load(overrides(args.model, args.seq, args.seq, args.recompute, tuple(args.set)))
    step, close = MAKERS[backend](cfg, args.seq, 1, args.seq)
    try:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(6):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        ms, wall_prof, names = profile(step)
    finally:
        close()
    step_ms = statistics.median(times) * 1e3
    return dict(backend=backend, step_ms=round(step_ms, 1), gpu_ms=round(sum(ms.values()), 1),
                profiled_wall_ms=round(wall_prof, 1), kinds={k: round(v, 1) for k, v in sorted(ms.items())},
                top={f"{kind(n)}: {n[:90]}": round(v, 2) for n, v in sorted(names.items(), key=lambda x: -x[1])[:25]},
                tflops=round(flops_per_token(cfg.model, args.seq) * args.seq / step_ms / 1e9, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-1.7b")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("ROW", json.dumps(one(args.one, args)), flush=True)
        return
    rows = {}
    for b in ("megatron", "transformers"):  # one process each: megatron-core keeps global state
        cmd = [sys.executable, __file__, "--one", b, f"--model={args.model}", f"--seq={args.seq}"] + \
            (["--recompute"] if args.recompute else []) + [f"--set={o}" for o in args.set]
        out = subprocess.run(cmd, capture_output=True, text=True)
        line = [x for x in out.stdout.splitlines() if x.startswith("ROW ")]
        if not line:
            print(f"FLOOR {b} failed: {(out.stderr or out.stdout)[-600:]}")
            return
        rows[b] = json.loads(line[-1][4:])
        print("FLOOR", json.dumps(rows[b]), flush=True)
    m, t = rows["megatron"], rows["transformers"]
    for b, r in rows.items():
        print(f"\n{b}: the 25 kernels with the most time (ms per step)")
        for n, v in r["top"].items():
            print(f"  {v:7.2f}  {n}")
    kinds = sorted(set(m["kinds"]) | set(t["kinds"]), key=lambda k: -max(m["kinds"].get(k, 0), t["kinds"].get(k, 0)))
    print(f"\n{args.model}, one {args.seq}-token sequence per step, overrides {args.set or 'none'}")
    print(f"{'kernel kind':14} {'megatron ms':>12} {'transformers ms':>16}")
    for k in kinds:
        print(f"{k:14} {m['kinds'].get(k, 0):12.1f} {t['kinds'].get(k, 0):16.1f}")
    print(f"{'GPU total':14} {m['gpu_ms']:12.1f} {t['gpu_ms']:16.1f}")
    print(f"{'step (wall)':14} {m['step_ms']:12.1f} {t['step_ms']:16.1f}")
    floor = min(m["kinds"].get("gemm", 0) + m["kinds"].get("attention", 0),
                t["kinds"].get("gemm", 0) + t["kinds"].get("attention", 0))
    print(f"FLOOR gemm+attention {floor:.1f} ms; megatron/transformers now {t['step_ms'] / m['step_ms']:.2f}x; "
          f"best possible speedup over transformers {t['step_ms'] / floor:.2f}x "
          f"(with the optimizer's {min(m['kinds'].get('optimizer', 0), t['kinds'].get('optimizer', 0)):.1f} ms: "
          f"{t['step_ms'] / (floor + min(m['kinds'].get('optimizer', 0), t['kinds'].get('optimizer', 0))):.2f}x)")


if __name__ == "__main__":
    main()
