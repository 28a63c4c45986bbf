"""The megatron backend's LoRA (rlrun.train.megatron.lora) against peft on the CPU: tests/gpu/lora_check.py's
checks in fp32, one rank and TP=2 over gloo. A development aid like cpu_harness.py (same setup, see its
docstring), not a test double: the shipped check is tests/gpu/test_gpu_megatron_lora.py on the lent GPUs.

    PYTHONPATH=/tmp/mcsrc:/tmp/mcdeps python tools/device/cpu_lora_harness.py /tmp/lora_tp1.pt
    PYTHONPATH=/tmp/mcsrc:/tmp/mcdeps python -m torch.distributed.run --nproc-per-node 2 \
        tools/device/cpu_lora_harness.py /tmp/lora_tp2.pt
    python tools/device/cpu_lora_harness.py --compare /tmp/lora_tp1.pt /tmp/lora_tp2.pt

    PYTHONPATH=/tmp/mcsrc:/tmp/mcdeps python tools/device/cpu_lora_harness.py --backend

Each run saves the trained adapters; --compare prints the largest relative difference between the two layouts'
adapters (TP=2 must train what TP=1 trains: same init, same data, only the reduction order differs).
--backend runs tests/gpu/test_gpu_megatron_lora.py's backend tests (step 0, training, merged export vs peft,
checkpoint, resume) on the CPU with cpu_backend_harness.py's redirections (fp32 instead of bf16).
"""
import os
import sys
from pathlib import Path

import torch

torch.cuda.current_device = lambda: "cpu"  # cpu_harness.py's redirection
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "gpu")]

import lora_check as L  # noqa: E402
import parity as P  # noqa: E402

# fp32 on the CPU: the Megatron and transformers forwards differ by summation order only (cpu_harness: ~1e-7);
# three SGD steps at lr 1 carry that into the adapters (measured ~1e-6 between TP layouts)
TOL, TOL_TRAINED = 1e-5, 1e-4
CASES = [("qwen3", L.lora_section()),
         ("qwen3", L.lora_section(targets=["q_proj", "v_proj", "down_proj"], save=["model.norm"])),
         ("qwen3", L.lora_section(targets=["k_proj", "up_proj", "o_proj"], save=["embed_tokens"])),
         ("llama", L.lora_section(rank=8, alpha=16.0)),
         ("qwen2", L.lora_section(targets=["q_proj", "k_proj", "v_proj", "o_proj"], save=["input_layernorm"])),
         # GLM-4's HF MLP is one gate_up_proj, which peft's gate_proj/up_proj do not name: attention only here
         ("glm4", L.lora_section(targets=["q_proj", "v_proj", "o_proj", "down_proj"]))]
SP_CASES = [("qwen3", L.lora_section(save=["model.norm"]))]  # TP=2 only: sequence parallelism


def main(out: str):
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    P.init_dist("gloo")
    tp, rank = dist.get_world_size(), dist.get_rank()
    states = []
    log = print if rank == 0 else (lambda *_: None)
    for family, lo in CASES:
        res = L.check(family, lo, tp, torch.float32, "cpu", TOL, TOL_TRAINED, log=log)
        states.append({k: v.clone() for k, v in res["state"].items()})
        ps.destroy_model_parallel()
    if tp > 1:  # the SP embedding forks megatron-core's CUDA RNG tracker; no dropout here draws from it
        import contextlib

        from megatron.core.tensor_parallel import random as mr
        mr.CudaRNGStatesTracker.fork = lambda self, *a, **k: contextlib.nullcontext()
    for family, lo in SP_CASES if tp > 1 else []:
        L.check(family, lo, tp, torch.float32, "cpu", TOL, TOL_TRAINED, log=log, sp=True)
        ps.destroy_model_parallel()
    if rank == 0:
        torch.save(states, out)
        print(f"LORA tp={tp} ALL OK -> {out}", flush=True)
    dist.destroy_process_group()


def compare(a: str, b: str):
    x, y = torch.load(a), torch.load(b)
    worst = max(P.rel_err(s[k], t[k]) for s, t in zip(x, y) for k in s)
    assert all(set(s) == set(t) for s, t in zip(x, y))
    print(f"LORA tp=1 vs tp=2 adapters after training: max rel_err {worst:.2e}")


def backend():
    import tempfile

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import cpu_backend_harness as H  # noqa: F401  (its import redirects CUDA to the CPU)
    import test_gpu_megatron_lora as T
    H._cpu_config()
    T.ON_CPU = True
    pair = T.make(T.LORA), T.make([])
    T.test_step0_is_the_base_model(pair)
    with tempfile.TemporaryDirectory(prefix="lora_h35m_") as d:
        T.test_training_moves_only_the_adapter_and_merged_export_matches_peft(pair, Path(d))
        T.test_adapter_checkpoint_is_smaller_and_resumes(pair, Path(d))
    print("LORA backend ALL OK", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--backend":
        sys.path.insert(0, str(ROOT / "tools" / "device"))
        backend()
    elif sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        os.environ.setdefault("MASTER_PORT", "29587")
        main(sys.argv[1])
