"""train.megatron on the GPU (tools/device/passthrough_check.py, one process per config so that peaks do not mix).

- CPU optimizer offload (megatron-core's HybridDeviceOptimizer, what slime's `--optimizer-cpu-offload
  --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer` give): the optimizer state lives in host memory,
  the train-step peak drops by about the fp32 master + Adam moments (12 B/param, rlrun.config.memory), the steps
  stay finite; the step time of both is printed for docs/benchmarks.md;
- a MoE routing option slime's scripts pass (the allgather dispatcher with a capacity factor and the probs
  token-drop policy, and the seq_aux_loss balancing) reaches the TransformerConfig and trains.
Run on the lent H100: see tools/device/README.md ("train.megatron").
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = ["hardware=h100", "train.backend=megatron", "model=qwen3-0.6b", "checkpoint.random_init=true",
        "train.gradient_accumulation_fusion=false", "rollout.max_response_len=1024", "train.max_tokens_per_gpu=4096",
        "checks.memory_fit=warn"]
OFFLOAD = ["+train.megatron.optimizer_cpu_offload=true", "+train.megatron.overlap_cpu_optimizer_d2h_h2d=true",
           "+train.megatron.use_precision_aware_optimizer=true", "+train.megatron.optimizer_offload_fraction=1.0"]
# conf/model/tiny-moe.yaml: untied, head_dim 64, as the gate asks of a Qwen3-MoE that SGLang serves (a tied, head_dim 16
# copy of model=tiny stopped here at validate, 2026-11-29)
TINY_MOE = ["hardware=h100", "train.backend=megatron", "model=tiny-moe", "train.gradient_accumulation_fusion=false"]


def check(overrides):
    out = subprocess.run([sys.executable, str(ROOT / "tools/device/passthrough_check.py"), *overrides],
                         capture_output=True, text=True, cwd=ROOT, env=os.environ, timeout=500)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print("PASSTHROUGH", json.dumps(res))
    return res


def test_cpu_optimizer_offload_moves_the_optimizer_state_to_the_host():
    base, off = check(BASE), check([*BASE, *OFFLOAD])
    assert off["optimizer"] == "HybridDeviceOptimizer" and off["state_devices"] == ["cpu"]
    assert off["fields"]["optimizer_cpu_offload"] is True and off["fields"]["overlap_cpu_optimizer_d2h_h2d"] is True
    assert all(g == g and g < float("inf") for g in base["grad_norms"] + off["grad_norms"])
    saved = base["peak_gib"] - off["peak_gib"]
    state = 12 * off["params"] / 2**30  # fp32 master + two fp32 moments, one DP rank
    print(f"CPU_OFFLOAD peak {base['peak_gib']:.2f} -> {off['peak_gib']:.2f} GiB (state {state:.2f} GiB); "
          f"step {base['step_s']:.3f} -> {off['step_s']:.3f} s")
    # the fp32 master weights + moments leave the GPU; grads and bf16 weights stay (half of the state, at least)
    assert saved > 0.5 * state


def test_moe_dispatcher_and_token_drop_reach_the_transformer_config():
    res = check([*TINY_MOE, "+train.megatron.moe_token_dispatcher_type=allgather",
                 "+train.megatron.moe_expert_capacity_factor=1.0", "+train.megatron.moe_token_drop_policy=probs",
                 "+train.megatron.moe_router_load_balancing_type=seq_aux_loss",
                 "+train.megatron.moe_aux_loss_coeff=0.001"])
    assert res["fields"] == {"moe_token_dispatcher_type": "allgather", "moe_expert_capacity_factor": 1.0,
                             "moe_token_drop_policy": "probs", "moe_router_load_balancing_type": "seq_aux_loss",
                             "moe_aux_loss_coeff": 0.001}
    assert all(g == g and g < float("inf") for g in res["grad_norms"])
