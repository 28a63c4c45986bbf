"""torch-native multi-tensor kernels for megatron-core's optimizer when Apex and Transformer
Engine are absent.

Without them megatron-core falls back to Python loops (megatron/core/utils.py
local_multi_tensor_*): the grad norm runs one norm kernel per tensor and then copies every
per-tensor norm to the host one by one, and clipping / the fp32->bf16 copy of the master weights
run two kernels per tensor. Measured on one H100 (Qwen3-1.7B shape): 30 of the 48 ms of the
optimizer step (docs/benchmarks.md). torch's _foreach_* ops do the same arithmetic in a few
multi-tensor launches with no host round trip. `install()` swaps them in only where megatron-core
chose its local fallback, so machines with Apex/TE keep their kernels.
"""
from __future__ import annotations

import torch


def _applier(op, noop_flag, tensor_lists, *args):
    return op(None, noop_flag, tensor_lists, *args)


def _l2_norm(_chunk, _noop, tensor_lists, _per_tensor, *_args):
    """Same contract as amp_C.multi_tensor_l2norm: ([1]-shaped fp32 total norm, None)."""
    tensors = [t for t in tensor_lists[0] if t.numel()]
    if not tensors:
        return torch.zeros(1, dtype=torch.float, device="cuda"), None
    norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)  # fp32 norms of bf16 grads too
    return torch.linalg.vector_norm(torch.stack(norms)).reshape(1), None


def _scale(_chunk, _noop, tensor_lists, scale):
    """dst = src * scale for every pair (in place when src is dst, as clipping calls it)."""
    src, dst = tensor_lists
    if not src:
        return
    if all(s is d for s, d in zip(src, dst)):
        torch._foreach_mul_(dst, scale)
    elif scale == 1.0:
        torch._foreach_copy_(dst, src)
    else:
        torch._foreach_copy_(dst, torch._foreach_mul(src, scale))


def _plain_distributed_optimizer(opt) -> bool:
    """bf16/fp32 params, no FSDP, no FP8/FP4 param gather, no precision-aware optimizer: the case
    where megatron-core's per-parameter copy loops are plain views and copies."""
    ddp = opt.ddp_config
    return not (ddp.use_megatron_fsdp or ddp.fp8_param_gather or getattr(ddp, "fp4_param_gather", False)
                or opt.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8
                or opt.config.reuse_grad_buf_for_mxfp8_param_ag or opt.is_stub_optimizer)


def _shard_pairs(opt):
    """(model-param buffer view, shard main param, model param, the shard's range in the param)
    per parameter of this DP rank's shard, in megatron-core's own order and ranges (the loops it
    replaces)."""
    pairs = []
    for main_groups, model_groups in ((opt.shard_fp32_from_float16_groups, opt.model_float16_groups),
                                      (opt.shard_fp32_groups, opt.model_fp32_groups)):
        for main_group, model_group in zip(main_groups, model_groups):
            for main, param in zip(main_group, model_group):
                ranges = opt._get_model_param_range_map(param)
                world, local = ranges["gbuf_world_in_bucket"], ranges["param"]
                gbuf, _, bucket = opt.model_param_gbuf_map[param]
                dst = opt.buffers[gbuf].buckets[bucket].param_data.view(-1)[world.start:world.end]
                pairs.append((dst, main, param, local))
    return pairs


def _fast_copies(opt, fused_state_dtype: torch.dtype | None = None) -> None:
    """Replace this DistributedOptimizer's two per-parameter Python loops (main -> model params
    after the step, model grads -> main grads before it) by one list built once: the params'
    buffer views stay valid (offload resizes the buffers' storage in place), so the step does one
    multi-tensor copy instead of ~3 Python dict lookups, a view and a kernel per parameter.
    With `fused_state_dtype` the inner AdamW's step becomes rlrun.train.megatron.adam's kernel,
    which also writes the bf16 model params (the copy after it is skipped) and reads bf16 grads
    as they are (no fp32 copy of the grad shard).
    Only for _plain_distributed_optimizer (install_optimizer checks)."""
    pairs = _shard_pairs(opt)
    dsts, mains = [d for d, _, _, _ in pairs], [m for _, m, _, _ in pairs]
    fused = None
    if fused_state_dtype is not None:
        from rlrun.train.megatron import adam
        fused = adam.install(opt, pairs, fused_state_dtype)

    def copy_main_params_to_model_params():
        if fused is not None and fused.take_written():
            return
        torch._foreach_copy_(dsts, mains)

    def copy_model_grads_to_main_grads():
        for _, main, param, r in pairs:
            g = param.main_grad.view(-1)[r.start:r.end]
            if fused is not None:
                fused.grads[id(main)] = g
            else:
                main.grad = g if g.dtype == main.dtype else g.float()

    opt._copy_main_params_to_model_params = copy_main_params_to_model_params
    opt._copy_model_grads_to_main_grads = copy_model_grads_to_main_grads


def install_optimizer(opt, fused_state_dtype: torch.dtype | None = None) -> int:
    """_fast_copies on every DistributedOptimizer megatron-core chained; returns how many."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    n = 0
    for inner in getattr(opt, "chained_optimizers", [opt]):
        if isinstance(inner, DistributedOptimizer) and _plain_distributed_optimizer(inner):
            _fast_copies(inner, fused_state_dtype)
            n += 1
    return n


def install() -> bool:
    """Replace megatron-core's local fallbacks; True if anything was replaced."""
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads, optimizer

    replaced = False
    for mod in (clip_grads, optimizer):
        if getattr(mod, "multi_tensor_applier", None) is utils.local_multi_tensor_applier:
            mod.multi_tensor_applier = _applier
            replaced = True
        if getattr(mod, "multi_tensor_scale_impl", None) is utils.local_multi_tensor_scale:
            mod.multi_tensor_scale_impl = _scale
        if getattr(mod, "l2_norm_impl", None) is utils.local_multi_tensor_l2_norm:
            mod.l2_norm_impl = _l2_norm
    return replaced
