"""What the megatron backend's LoRA (rlrun.train.megatron.lora) does not do, refused by rlrun validate (pure
Python: BackendKind.lora_check). Model-independent LoRA rules (targets, modules_to_save, MoE, critics) are
rlrun.config.mode_rules.lora's."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem

_FIX = "or model.lora.rank=0 (full fine-tuning)"


def check(cfg) -> Iterator[Problem]:
    p, t, m, lo = cfg.parallelism, cfg.train, cfg.model, cfg.model.lora
    if p.pp > 1:
        yield Problem("parallelism.pp", "LoRA on the megatron backend is built and checked for one pipeline stage: "
                      "the adapter checkpoint and the frozen tied embedding's gradient exchange between stages are not "
                      "wired", f"set parallelism.pp=1 (LoRA's frozen base weights need less memory per GPU), {_FIX}",
                      p.pp)
    if t.cuda_graphs:
        yield Problem("train.cuda_graphs", "LoRA on the megatron backend has not been checked under CUDA graph "
                      "capture (the adapters run in forward hooks of the frozen linear layers)",
                      f"set train.cuda_graphs=false, {_FIX}", True)
    qkv = [x for x in lo.target_modules if x in ("q_proj", "k_proj", "v_proj")]
    if qkv and m.num_query_groups % p.tp:
        yield Problem("parallelism.tp", f"LoRA on {'/'.join(qkv)}: each TP rank must hold whole query groups "
                      f"(model.num_query_groups={m.num_query_groups} over parallelism.tp={p.tp}), so that the "
                      "adapter's rows split as linear_qkv's do", f"set parallelism.tp to a divisor of "
                      f"{m.num_query_groups}, target o_proj and the MLP only, {_FIX}", p.tp)
