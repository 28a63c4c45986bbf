"""Checks of the megatron backend's LoRA (rlrun.train.megatron.lora) against peft on the same HF model, shared by
tests/gpu/test_gpu_megatron_lora.py (one GPU) and tools/device/cpu_lora_harness.py (CPU, TP=1 and TP=2 over gloo).

check(): a small model of the family in Megatron with LoRA and the same model in transformers;
1. at init the LoRA model's logits equal the base model's exactly (B = 0);
2. a few SGD steps on a toy loss move the adapters (and modules_to_save) only, the base weights stay bit-equal;
3. the same steps on peft's LoraModel from the same initial adapter train the same adapter;
4. peft's LoraModel given the trained adapter (rlrun's adapter_state is peft's adapter_model.safetensors) gives
   the same logits as the Megatron model, peft's merged weights equal rlrun's merged export, and transformers
   loaded with the merged export gives those logits too.
"""
from __future__ import annotations

import copy
from types import SimpleNamespace

import torch

import parity as P

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_section(rank=4, alpha=8.0, targets=ALL, save=()):
    return SimpleNamespace(rank=rank, alpha=alpha, dropout=0.0, target_modules=list(targets),
                           modules_to_save=list(save))


def gathered_logits(gpt, ids):
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region
    pos = torch.arange(ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
    return gather_from_tensor_model_parallel_region(gpt(ids, pos, attention_mask=None))


def build(model, lo, tp, dtype, device, seed=0, sp=False):
    """(hf, gpt): the HF model (random init) and the Megatron model with its weights and model.lora's adapters."""
    from megatron.core import parallel_state as ps

    from rlrun.train.megatron import lora
    hf = P.hf_causal_lm(model, torch.float32).to(device).eval()
    gpt = P.megatron_from_hf(model, hf, P.parallelism(tp=tp, sp=sp), dtype, cpu_init=device == "cpu")
    lora.wrap(gpt, model, lo, seed=seed, layer_offset=0, tp_rank=ps.get_tensor_model_parallel_rank(),
              tp_size=tp, tp_group=ps.get_tensor_model_parallel_group(), sequence_parallel=sp)
    return hf, gpt


def train(gpt, model, ids, steps=3, lr=1.0):
    """SGD steps on next-token cross-entropy to fixed targets (SGD: rounding differences stay that small, where
    Adam would turn a near-zero gradient's rounding into a full step of either sign). The adapters' grads are the
    same on every TP rank by construction (rlrun.train.megatron.lora): replicas stay in step without a reduction,
    except sequence-parallel params (reduced here as finalize_model_grads does)."""
    params = [p for p in gpt.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    g = torch.Generator().manual_seed(7)
    tgt = torch.randint(0, model.vocab_size, ids.shape, generator=g).to(ids.device)
    gpt.train()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(gathered_logits(gpt, ids).float().flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        for p in params:  # what finalize_model_grads does for sequence-parallel params (norms, row layers' B)
            if getattr(p, "sequence_parallel", False) and torch.distributed.is_initialized():
                torch.distributed.all_reduce(p.grad)
        opt.step()
    gpt.eval()
    return float(loss.detach())


def train_peft(pm, model, ids, steps=3, lr=1.0):
    """train()'s steps on peft's model (the torch backend's LoRA): the reference for the adapters' gradients."""
    from peft import get_peft_model_state_dict
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    g = torch.Generator().manual_seed(7)
    tgt = torch.randint(0, model.vocab_size, ids.shape, generator=g).to(ids.device)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(pm(ids).logits.float().flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return get_peft_model_state_dict(pm)


def peft_model(hf, lo, state):
    """peft's LoraModel on a copy of `hf` holding `state` (rlrun's adapter_state, peft's file format)."""
    from peft import set_peft_model_state_dict

    from rlrun.train import lora as torch_lora
    pm = torch_lora.wrap(copy.deepcopy(hf), lo)
    res = set_peft_model_state_dict(pm, {k: v.float().cpu() for k, v in state.items()})
    assert not res.unexpected_keys, res.unexpected_keys
    return pm.to(next(hf.parameters()).device).eval()


def check(family: str, lo, tp: int, dtype, device, tol: float, tol_trained: float, log=print, steps: int = 3,
          sp: bool = False) -> dict:
    """The three checks of the module docstring for model family `family`; returns the measured errors (and the
    adapter state, for comparing layouts). tol: relative logit error allowed, tol_trained: relative error of the
    adapters after the same SGD steps as peft's (fp32 or bf16: the caller says where each comes from)."""
    from rlrun.train.megatron import lora
    from rlrun.train.megatron.weights import export_hf
    torch.manual_seed(3)
    model = P.small_model(P.ARCHS[family])
    hf, gpt = build(model, lo, tp, dtype, device, sp=sp)
    ids = torch.randint(0, model.vocab_size, (2, 32)).to(device)
    if torch.distributed.is_initialized():
        torch.distributed.broadcast(ids, 0)
    with torch.no_grad():
        base = dict((k, v.clone()) for k, v in gpt.named_parameters() if not v.requires_grad)
        adapters = {k: v.clone() for k, v in gpt.named_parameters() if v.requires_grad}
        # B = 0: the hooks add exact zeros
        step0 = torch.equal(gathered_logits(gpt, ids), _without_adapters(gpt, ids))
        init = lora.adapter_state(gpt, model, lo)
    loss = train(gpt, model, ids, steps=steps)
    trained_peft = train_peft(peft_model(hf, lo, init).train(), model, ids, steps=steps)
    moved = [k for k, v in gpt.named_parameters() if v.requires_grad and not torch.equal(v, adapters[k])]
    base_same = all(torch.equal(v, base[k]) for k, v in gpt.named_parameters() if not v.requires_grad)
    state = lora.adapter_state(gpt, model, lo)
    with torch.no_grad():
        got = gathered_logits(gpt, ids).float()
        pm = peft_model(hf, lo, state)
        want = pm(ids).logits.float()
        from rlrun.train import lora as torch_lora
        peft_merged = torch_lora.merged_state_dict(pm)
        merged = {k: v for b in export_hf(gpt, model, 1 << 24, weight=lora.merger(gpt)) for k, v in b}
        merge_err = max(P.rel_err(merged[k].float().cpu(), peft_merged[k].float()) for k in merged)
        hf_merged = copy.deepcopy(hf)
        hf_merged.load_state_dict(merged, strict=False)
        merged_logits = hf_merged(ids).logits.float()
    out = {"step0_equal": step0, "moved": len(moved), "trainable": len(adapters), "base_unchanged": base_same,
           "loss": loss, "logit_err_vs_peft": P.rel_err(got, want), "merged_err_vs_peft": merge_err,
           "merged_logit_err": P.rel_err(merged_logits, want),
           "adapter_moved": P.rel_err(got, _without_adapters(gpt, ids).float()),
           "trained_err_vs_peft": max(P.rel_err(state[k].float().cpu(), trained_peft[k].float().cpu()) for k in state),
           "state": state}
    log(f"LORA {family} tp={tp} sp={sp} targets={','.join(lo.target_modules)} save={lo.modules_to_save}: "
        + " ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items() if k != "state"))
    assert step0 and base_same and len(moved) == len(adapters)
    assert out["logit_err_vs_peft"] < tol and out["merged_err_vs_peft"] < tol and out["merged_logit_err"] < tol
    assert out["trained_err_vs_peft"] < tol_trained
    assert out["adapter_moved"] > 10 * out["logit_err_vs_peft"]  # the trained adapter changes the logits
    return out


@torch.no_grad()
def _without_adapters(gpt, ids):
    """The logits with every adapter's B set to zero for one forward (the base model's)."""
    from rlrun.train.megatron import lora
    saved = []
    for _, _, a in lora.adapters(gpt):
        for m in a.hf_modules:
            saved.append((a.b(m), a.b(m).clone()))
            a.b(m).zero_()
    try:
        return gathered_logits(gpt, ids)
    finally:
        for p, v in saved:
            p.copy_(v)
