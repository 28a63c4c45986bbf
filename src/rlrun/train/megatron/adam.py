"""One fused AdamW kernel for megatron-core's DistributedOptimizer when Apex and TE are absent.

Without them megatron-core steps a torch.optim.AdamW over its fp32 master shards and then copies
every shard into the bf16 model parameters. That is three passes over the state per step
(read p, g, m, v; write p, m, v; read p again, write the bf16 copy), ~38 B/param of memory
traffic with the grad norm: ~34 ms of Qwen3-1.7B's step on an H100 (docs/benchmarks.md).
Here one Triton kernel per shard reads the master weight, the grad (fp32 or bf16, as the DDP
keeps it), and both moments, and writes the master weight, the moments and the bf16 model
parameter. The arithmetic is torch.optim.AdamW's, in fp32.

`optim.state_dtype=bf16` keeps the two moments in bf16 (TE's precision-aware optimizer,
`--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`, does the same): Adam state 12 -> 8 B/param, the
room Qwen3-4B needs for activations on one 80 GB GPU. The master weights stay fp32, so updates
of lr ~1e-6 are not rounded away as they are in bf16 weights.
"""
from __future__ import annotations

import functools
import math
import os

import torch

_BLOCK = 4096
STATE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@functools.cache
def _kernel():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def adamw(p_ptr, g_ptr, m_ptr, v_ptr, out_ptr, n, grad_scale, beta1, beta2, eps, decay, step_size, bc2_sqrt,
              HAS_OUT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        p = tl.load(p_ptr + offs, mask=inside, other=0.0)
        g = tl.load(g_ptr + offs, mask=inside, other=0.0).to(tl.float32) * grad_scale
        m = tl.load(m_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        # torch.optim.AdamW: decoupled decay, then lerp / addcmul of the moments, then addcdiv,
        # with IEEE sqrt and division as torch uses (Triton's defaults are approximate). On the H100
        # the updates differ from torch's by 8.5e-6 either way: one fp32 ulp of the weights.
        p = p * decay
        m = m + (1.0 - beta1) * (g - m)
        v = v * beta2 + (1.0 - beta2) * g * g
        p = p - step_size * tl.div_rn(m, tl.div_rn(tl.sqrt_rn(v), bc2_sqrt) + eps)
        tl.store(p_ptr + offs, p, mask=inside)
        tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=inside)
        tl.store(v_ptr + offs, v.to(v_ptr.dtype.element_ty), mask=inside)
        if HAS_OUT:
            tl.store(out_ptr + offs, p.to(out_ptr.dtype.element_ty), mask=inside)

    return triton, adamw


def available(device: torch.device) -> bool:
    """Triton is importable and runs on `device`: an NVIDIA GPU, or the CPU under Triton's
    interpreter (TRITON_INTERPRET=1, set before Triton is imported: the CPU tests and harness).
    ROCm is left out: the kernel has been run on H100/H200 only, and a compile failure there would
    stop a run at its first step; ROCm keeps torch's AdamW (a config rule refuses bf16 moments)."""
    gpu = device.type == "cuda" and torch.version.hip is None
    return (gpu or os.environ.get("TRITON_INTERPRET") == "1") and _kernel() is not None


def adamw_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
           model_param: torch.Tensor | None, *, lr: float, betas: tuple[float, float], eps: float,
           weight_decay: float, step: int, grad_scale: float = 1.0) -> None:
    """One torch.optim.AdamW step (step = the step's 1-based count) on a contiguous fp32 `param`,
    in place, on the gradient `grad * grad_scale` (the clipping coefficient; `grad` itself is not
    written); `grad` and the moments may be bf16. `model_param`, if given, receives the new
    weights rounded to its dtype (round to nearest even, as Tensor.copy_)."""
    n = param.numel()
    for name, t in (("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq), ("model_param", model_param)):
        if t is not None and (t.numel() != n or not t.is_contiguous()):
            raise ValueError(f"adamw_: {name} has {t.numel()} elements (contiguous={t.is_contiguous()}), "
                             f"param has {n}; every tensor must be a contiguous tensor of the same size")
    if n == 0:
        return
    triton, kernel = _kernel()
    beta1, beta2 = betas
    kernel[(triton.cdiv(n, _BLOCK),)](
        param, grad, exp_avg, exp_avg_sq, param if model_param is None else model_param, n,
        grad_scale, beta1, beta2, eps, 1.0 - lr * weight_decay, lr / (1.0 - beta1 ** step),
        math.sqrt(1.0 - beta2 ** step), HAS_OUT=model_param is not None, BLOCK=_BLOCK, num_warps=8)


class FusedAdamWStep:
    """Stands in for the `step` of the torch.optim.AdamW inside one DistributedOptimizer.

    - State lives where torch keeps it (optimizer.state[p]: exp_avg, exp_avg_sq, and step as a
      CPU tensor), so save/load and offload see a plain AdamW; with bf16 only the moments' dtype
      differs.
    - `grads` maps each master shard (by id) to its slice of the DDP's grad buffer, in the
      buffer's dtype: a bf16 grad cannot be an fp32 parameter's `.grad`, so none is set.
    - `grad_scale` is the clipping coefficient, applied inside the kernel (no pass over the grads).
    - `model_params` maps each master shard to its bf16 view in the DDP's param buffer; after a
      step that wrote them, `take_written()` is True once and the main -> model copy is skipped.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model_params: dict[int, torch.Tensor],
                 state_dtype: torch.dtype):
        if type(optimizer) is not torch.optim.AdamW:
            raise TypeError(f"the fused AdamW step replaces torch.optim.AdamW, got {type(optimizer).__name__}")
        for group in optimizer.param_groups:
            if group.get("amsgrad") or group.get("maximize"):
                raise ValueError("the fused AdamW step has no amsgrad / maximize")
            # torch's load_state_dict moves `step` to the device for fused groups; here it stays on
            # the host, where the bias corrections are computed.
            group["fused"], group["foreach"] = False, False
        self.optimizer, self.model_params, self.state_dtype = optimizer, model_params, state_dtype
        self.grads: dict[int, torch.Tensor] = {}
        self.grad_scale = 1.0
        self.written = False

    def _state(self, p: torch.Tensor) -> dict:
        st = self.optimizer.state[p]
        if not st:
            st["step"] = torch.tensor(0.0)
            st["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype, memory_format=torch.contiguous_format)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype, memory_format=torch.contiguous_format)
        for key in ("exp_avg", "exp_avg_sq"):  # torch's load_state_dict casts them to the param's dtype
            if st[key].dtype != self.state_dtype:
                st[key] = st[key].to(self.state_dtype)
        if st["step"].device.type != "cpu":
            st["step"] = st["step"].cpu()
        return st

    @torch.no_grad()
    def __call__(self, closure=None):
        if closure is not None:
            raise ValueError("the fused AdamW step takes no closure")
        todo = [(p, grad, group) for group in self.optimizer.param_groups for p in group["params"]
                if (grad := self.grads.get(id(p))) is not None]
        # Largest first: each big kernel keeps the GPU busy while the host launches the next, so by
        # the time the small ones come (norm weights, biases: ~1/3 of the launches, no GPU time to
        # speak of) a backlog hides their launch cost; in megatron-core's group order they come first.
        todo.sort(key=lambda item: -item[0].numel())
        for p, grad, group in todo:
            st = self._state(p)
            st["step"] += 1
            adamw_(p, grad, st["exp_avg"], st["exp_avg_sq"], self.model_params.get(id(p)),
                   lr=group["lr"], betas=group["betas"], eps=group["eps"], weight_decay=group["weight_decay"],
                   step=int(st["step"]), grad_scale=self.grad_scale)
        self.grad_scale = 1.0
        self.written = True

    def take_written(self) -> bool:
        written, self.written = self.written, False
        return written


# -- wiring into megatron-core's DistributedOptimizer --------------------------------------------
_OWNER = "_rlrun_fused_adamw"  # attribute on a master shard: the FusedAdamWStep that steps it


def install(opt, pairs, state_dtype: torch.dtype) -> FusedAdamWStep:
    """Make `opt` (a plain DistributedOptimizer; `pairs` from fast_ops._shard_pairs) step with the
    fused kernel. Its grad norm reads FusedAdamWStep.grads, chosen by megatron-core's own filter
    (shared and TP-duplicate params left out), and its clipping sets the kernel's grad scale."""
    from megatron.core.optimizer import optimizer as mco

    mains = [m for _, m, _, _ in pairs]
    if any(mco._is_separate_grad_norm_group(mco._get_param_grad_norm_group(m)) for m in mains):
        raise ValueError("the fused AdamW step does not handle separate grad-norm groups")
    half = {id(m) for group in opt.shard_fp32_from_float16_groups for m in group}
    step = FusedAdamWStep(opt.optimizer, {id(m): d for d, m, _, _ in pairs if id(m) in half}, state_dtype)
    opt.optimizer.step = step
    for m in mains:
        setattr(m, _OWNER, step)

    # megatron-core's filter reads `.grad`: run it once over stand-in grads (zero-stride, no
    # memory) and keep the indices it picks.
    for m in mains:
        m.grad = torch.zeros((), dtype=m.dtype, device=m.device).expand(m.shape)
    picked = {id(g) for g in opt.get_grads_for_grad_norm()}
    for_norm = [id(m) for m in mains if id(m.grad) in picked]
    for m in mains:
        m.grad = None

    def get_grads_for_grad_norm(grad_norm_group=None):
        return [] if grad_norm_group is not None else [step.grads[i] for i in for_norm if i in step.grads]

    opt.get_grads_for_grad_norm = get_grads_for_grad_norm
    if getattr(mco.clip_grad_by_total_norm_fp32, "__wrapped__", None) is None:
        mco.clip_grad_by_total_norm_fp32 = _clip_hook(mco.clip_grad_by_total_norm_fp32)
    return step


def _clip_hook(clip):
    """megatron-core's clip_grad_by_total_norm_fp32, except that shards stepped by a
    FusedAdamWStep get the coefficient as their grad scale instead of an in-place pass."""
    @functools.wraps(clip)
    def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
        params = [parameters] if torch.is_tensor(parameters) else list(parameters)
        rest = [p for p in params if getattr(p, _OWNER, None) is None]
        coeff = float(max_norm / (total_norm + 1.0e-6))
        if coeff < 1.0:  # megatron-core's rule: scale only when the norm is above max_norm
            for step in {id(s): s for p in params if (s := getattr(p, _OWNER, None)) is not None}.values():
                step.grad_scale = coeff
        if rest:
            clip(rest, max_norm, total_norm, use_decoupled_grad=use_decoupled_grad)
    return clip_grad_by_total_norm_fp32
