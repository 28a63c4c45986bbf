"""Train-step throughput on one GPU: rlrun's megatron backend vs transformers + SDPA.

    python bench/megatron_mfu.py --models qwen3-1.7b,qwen3-4b --seq 4096

Both sides train a random-init model of the named conf/model shape on --seqs sequences of --seq
tokens per optimizer step (fwd + bwd + optimizer), --max-tokens tokens per micro-batch (default
--seq: one sequence each; more packs several sequences into one micro-batch, as an RL step with
train.max_tokens_per_gpu does):
- megatron: MegatronBackend.train_step (GRPO loss from rlrun.algo, bf16 params, fp32 grads and
  distributed Adam: 18 B/param of state), sequences packed THD (varlen attention);
- transformers (max_tokens // seq sequences per forward, gradient accumulation over the rest):
  AutoModelForCausalLM with attn_implementation="sdpa", bf16 params, cross-entropy
  loss, torch.optim.AdamW(fused=True) on bf16 states (8 B/param) - the baseline in
  ../shared/DEVICE.md.
FLOPs per token (fwd+bwd) = 6 * matmul params (layers + lm head) + 6 * layers * heads*head_dim * seq
(causal attention: half of the 12 * ... of full attention). TFLOP/s = that * tokens/s.
Peak memory is torch.cuda.max_memory_allocated (and _reserved) over the whole run, warm-up
included, next to `rlrun plan`'s trainer estimate for the same config where the config layer
provides one.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

import torch


def overrides(name: str, seq: int, max_tokens: int, recompute: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    rc = ["train.recompute.granularity=full", "train.recompute.method=uniform", "train.recompute.num_layers=1"]
    return (rc if recompute else []) + list(extra) + [f"model={name}", "checkpoint.random_init=true", "hardware=h100",
            "train.backend=megatron",
            f"train.max_tokens_per_gpu={max_tokens}", f"train.log_probs_max_tokens_per_gpu={max_tokens}",
            "rollout.max_response_len=1024", "eval.max_response_len=1024", "train.gpus_per_node=1",
            "rollout.num_gpus=1", "parallelism=tp1", "rollout.gpus_per_engine=1"]


def flops_per_token(m, seq: int) -> float:
    h, f, L = m.hidden_size, m.ffn_hidden_size, m.num_layers
    q, kv = m.num_attention_heads * m.head_dim, m.num_query_groups * m.head_dim
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * f
    return 6 * (L * per_layer + h * m.vocab_size) + 6 * L * q * seq


def timed(step, n: int, warmup: int) -> tuple[float, float, float, list[float], float]:
    # Peaks over the whole run, warm-up included: with train.cuda_graphs the capture (warm-up
    # step 2) is where the activations are allocated, and replays allocate nothing.
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    free, total = torch.cuda.mem_get_info()
    outside = ((total - free) - torch.cuda.memory_reserved()) / 2**30  # CUDA context, NCCL, cuBLAS/cuDNN
    return (statistics.median(times), torch.cuda.max_memory_allocated() / 2**30, outside, times,
            torch.cuda.max_memory_reserved() / 2**30)


def make_megatron(cfg, seq: int, seqs: int, max_tokens: int):
    """(one megatron-backend train step, cleanup) on `seqs` random sequences of `seq` tokens."""
    from rlrun.train.base import TrainBatch
    from rlrun.train.megatron_backend import MegatronBackend
    be = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=1000)
    be.init()
    g = torch.Generator().manual_seed(0)
    tokens = [torch.randint(0, cfg.model.vocab_size, (seq,), generator=g) for _ in range(seqs)]
    batch = TrainBatch(tokens=tokens, response_start=[1] * seqs, loss_mask=[torch.ones(seq - 1)] * seqs,
                       advantages=[torch.ones(seq - 1)] * seqs)

    def close():
        be.shutdown()
        gc.collect()
        torch.cuda.empty_cache()
    return (lambda: be.train_step(batch)), close


def make_transformers(cfg, seq: int, seqs: int, max_tokens: int):
    """(one transformers + SDPA train step, cleanup): CE loss, fused AdamW on bf16 states."""
    import transformers

    from rlrun.train.hf_model import hf_config
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config(cfg.model), dtype=torch.bfloat16,
                                                              attn_implementation="sdpa")
    model.config.use_cache = False
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    per_forward = max(1, max_tokens // seq)
    ids = torch.randint(0, cfg.model.vocab_size, (seqs, seq), device="cuda")

    def step():
        for chunk in ids.split(per_forward):
            loss = model(input_ids=chunk, labels=chunk, use_cache=False).loss * (len(chunk) / seqs)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def close():
        nonlocal model, opt
        del model, opt
        gc.collect()
        torch.cuda.empty_cache()
    return step, close


MAKERS = {"megatron": make_megatron, "transformers": make_transformers}


def plan_estimate_gib(cfg) -> float:
    """`rlrun plan`'s per-GPU trainer memory for the same config (rlrun.config.memory)."""
    from rlrun.config.memory import estimate
    return round(estimate(cfg).trainer_total, 1)


def run_one(name: str, backend: str, args) -> dict:
    from rlrun.config import load
    recompute = name in args.recompute.split(",")
    max_tokens = args.max_tokens or args.seq
    cfg = load(overrides(name, args.seq, max_tokens, recompute, tuple(args.set)))
    tag = ("+recompute" if recompute else "") + ("+torch-kernels" if args.torch_kernels else "") + (
        "+torch-adam" if args.torch_adam else "")
    row = dict(model=name, backend=backend + (tag if backend == "megatron" else ""))
    try:
        step, close = MAKERS[backend](cfg, args.seq, args.seqs, max_tokens)
        try:
            sec, peak, outside, times, reserved = timed(step, args.steps, args.warmup)
        finally:
            close()
    except torch.OutOfMemoryError as e:
        return dict(row, error=f"OOM: {str(e)[:400]}", peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1),
                    plan_gib=plan_estimate_gib(cfg) if backend == "megatron" else None)
    tps = args.seq * args.seqs / sec
    return dict(row, seq=args.seq, seqs=args.seqs, max_tokens=max_tokens, step_s=round(sec, 4), tokens_per_s=round(tps),
                tflops=round(flops_per_token(cfg.model, args.seq) * tps / 1e12, 1), peak_gib=round(peak, 1),
                peak_reserved_gib=round(reserved, 1),
                outside_allocator_gib=round(outside, 2), step_times=[round(t, 4) for t in times],
                plan_gib=plan_estimate_gib(cfg) if backend == "megatron" else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="qwen3-1.7b,qwen3-4b")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--seqs", type=int, default=1, help="sequences per optimizer step")
    ap.add_argument("--max-tokens", type=int, default=None, help="tokens per micro-batch (default --seq)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backends", default="megatron,transformers")
    ap.add_argument("--recompute", default="", help="models whose megatron run uses full recompute")
    ap.add_argument("--set", action="append", default=[], help="extra config override (repeatable), e.g. "
                    "train.fp32_grads=false or train.gradient_accumulation_fusion=false")
    ap.add_argument("--torch-kernels", action="store_true", help="megatron without rlrun.train.megatron.kernels "
                    "and .rope: torch's RMSNorm/SwiGLU ops and megatron-core's THD rope (for an A/B in one run)")
    ap.add_argument("--torch-adam", action="store_true", help="megatron with torch's fused AdamW and a separate "
                    "master -> model copy instead of rlrun.train.megatron.adam's kernel (optim.state_dtype=fp32 only)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # model:backend, in a child process
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if args.one:
        if args.torch_kernels:
            from rlrun.train.megatron import kernels, rope
            kernels.ENABLED = rope.ENABLED = False
        if args.torch_adam:
            from rlrun.train import megatron_backend
            megatron_backend.FUSED_ADAM = False
        print("ROW", json.dumps(run_one(*args.one.split(":"), args)), flush=True)
        return
    rows = []
    for name in args.models.split(","):
        for b in args.backends.split(","):
            # One process per run: megatron-core keeps global state (groups, buffers) that would
            # hold GPU memory into the next run.
            cmd = [sys.executable, __file__, "--one", f"{name}:{b}"] + [
                f"--{k.replace('_', '-')}={getattr(args, k)}" for k in ("seq", "seqs", "steps", "warmup", "recompute")] + (
                [f"--max-tokens={args.max_tokens}"] if args.max_tokens else []) + [f"--set={o}" for o in args.set] + (
                ["--torch-kernels"] if args.torch_kernels else []) + (["--torch-adam"] if args.torch_adam else [])
            out = subprocess.run(cmd, capture_output=True, text=True)
            line = [x for x in out.stdout.splitlines() if x.startswith("ROW ")]
            rows.append(json.loads(line[-1][4:]) if line else
                        dict(model=name, backend=b, error=(out.stderr or out.stdout)[-300:]))
            print("BENCH", json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\n{args.seqs} x {args.seq} tokens per step, {args.max_tokens or args.seq} per micro-batch, "
          f"overrides {args.set or 'none'}")
    print(f"\n{'model':12} {'backend':20} {'step s':>7} {'tok/s':>7} {'TFLOP/s':>8} {'peak GiB':>9} {'plan GiB':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:12} {r['backend']:20} {r['error']}")
        else:
            print(f"{r['model']:12} {r['backend']:20} {r['step_s']:7.3f} {r['tokens_per_s']:7d} {r['tflops']:8.1f} "
                  f"{r['peak_gib']:9.1f} {str(r['plan_gib']):>9}")


if __name__ == "__main__":
    main()
