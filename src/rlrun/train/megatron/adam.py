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
    def adamw(ptrs, sizes, block_tensor, block_start, scalars, grad_scale, beta1, beta2, eps,
              G: tl.constexpr, S: tl.constexpr, O: tl.constexpr, HAS_OUT: tl.constexpr, ALIGNED: tl.constexpr,
              BLOCK: tl.constexpr):
        # Many tensors in one launch: program `pid` steps BLOCK elements of tensor t from `start`;
        # row t of `ptrs` holds its param, grad, exp_avg, exp_avg_sq and model-param addresses.
        pid = tl.program_id(0)
        t = tl.load(block_tensor + pid).to(tl.int64)
        start = tl.multiple_of(tl.load(block_start + pid), BLOCK)
        offs = start + tl.arange(0, BLOCK)
        inside = offs < tl.load(sizes + t)
        p_ptr = tl.load(ptrs + 5 * t).to(tl.pointer_type(tl.float32))
        g_ptr = tl.load(ptrs + 5 * t + 1).to(tl.pointer_type(G))
        m_ptr = tl.load(ptrs + 5 * t + 2).to(tl.pointer_type(S))
        v_ptr = tl.load(ptrs + 5 * t + 3).to(tl.pointer_type(S))
        o_ptr = tl.load(ptrs + 5 * t + 4).to(tl.pointer_type(O))
        if ALIGNED:  # every address is 16-byte aligned (checked on the host): vector loads
            p_ptr, g_ptr = tl.multiple_of(p_ptr, 16), tl.multiple_of(g_ptr, 16)
            m_ptr, v_ptr, o_ptr = tl.multiple_of(m_ptr, 16), tl.multiple_of(v_ptr, 16), tl.multiple_of(o_ptr, 16)
        decay = tl.load(scalars + 3 * t)         # 1 - lr * weight_decay
        step_size = tl.load(scalars + 3 * t + 1)  # lr / (1 - beta1^step)
        bc2_sqrt = tl.load(scalars + 3 * t + 2)   # sqrt(1 - beta2^step)
        p = tl.load(p_ptr + offs, mask=inside, other=0.0)
        g = tl.load(g_ptr + offs, mask=inside, other=0.0).to(tl.float32) * grad_scale
        m = tl.load(m_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        # torch.optim.AdamW: decoupled decay, then lerp / addcmul of the moments, then addcdiv,
        # with IEEE sqrt and division (Triton's defaults are the approximate PTX ones).
        p = p * decay
        m = m + (1.0 - beta1) * (g - m)
        v = v * beta2 + (1.0 - beta2) * g * g
        p = p - step_size * tl.div_rn(m, tl.div_rn(tl.sqrt_rn(v), bc2_sqrt) + eps)
        tl.store(p_ptr + offs, p, mask=inside)
        tl.store(m_ptr + offs, m.to(S), mask=inside)
        tl.store(v_ptr + offs, v.to(S), mask=inside)
        if HAS_OUT:
            tl.store(o_ptr + offs, p.to(O), mask=inside)

    dtypes = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
    return adamw, dtypes


def available(device: torch.device) -> bool:
    """Triton is importable and runs on `device`: a GPU, or the CPU under Triton's interpreter
    (TRITON_INTERPRET=1, set before Triton is imported: the CPU tests and harness)."""
    return (device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1") and _kernel() is not None


class _Table:
    """The device-side index of one launch: per tensor its 5 addresses and size, per program its
    tensor and start. Rebuilt only when an address changes (offload moves the state)."""

    def __init__(self):
        self.key = None

    def update(self, rows: list[tuple[torch.Tensor, ...]], device) -> None:
        """Rebuild if this is the first use or an address or size changed (then check the rows)."""
        key = tuple(t.data_ptr() for row in rows for t in row) + tuple(row[0].numel() for row in rows)
        if key == self.key:
            return
        _check_rows(rows)
        n_ptrs = 5 * len(rows)
        sizes = [row[0].numel() for row in rows]
        tensor_of, start_of = [], []
        for i, n in enumerate(sizes):
            starts = range(0, n, _BLOCK)
            tensor_of += [i] * len(starts)
            start_of += starts
        self.ptrs = torch.tensor(key[:n_ptrs], dtype=torch.int64).to(device)
        self.sizes = torch.tensor(sizes, dtype=torch.int64).to(device)
        self.block_tensor = torch.tensor(tensor_of, dtype=torch.int32).to(device)
        self.block_start = torch.tensor(start_of, dtype=torch.int64).to(device)
        self.aligned = all(ptr % 16 == 0 for ptr in key[:n_ptrs])
        self.key = key


def _check_rows(rows: list[tuple[torch.Tensor, ...]]) -> None:
    """Every row (param, grad, exp_avg, exp_avg_sq, model_param): contiguous tensors of the param's
    size, with the first row's dtypes (one launch has one dtype per slot), fp32 params."""
    names = ("param", "grad", "exp_avg", "exp_avg_sq", "model_param")
    want = [t.dtype for t in rows[0]]
    if want[0] != torch.float32:
        raise ValueError(f"adamw: the params (fp32 master weights) are {want[0]}")
    for row in rows:
        n = row[0].numel()
        for name, t, dtype in zip(names, row, want):
            if t.numel() != n or not t.is_contiguous():
                raise ValueError(f"adamw: {name} has {t.numel()} elements (contiguous={t.is_contiguous()}), its "
                                 f"param has {n}; every tensor must be a contiguous tensor of the same size")
            if t.dtype != dtype:
                raise ValueError(f"adamw: {name} is {t.dtype}, the launch's first {name} is {dtype}")


def adamw_multi_(rows: list[tuple[torch.Tensor, ...]], hyper: list[tuple[float, float, int]], *,
                 betas: tuple[float, float], eps: float, grad_scale: float = 1.0, table: _Table | None = None) -> None:
    """One torch.optim.AdamW step over many tensors in one launch, in place. rows[i] = (param fp32,
    grad, exp_avg, exp_avg_sq[, model_param]): contiguous, equal sizes; all rows have the same
    dtypes and all or none have a model param, which receives the new weights rounded to its
    dtype (to nearest even, as Tensor.copy_). hyper[i] = (lr, weight_decay, step), step the
    1-based count. The gradient used is grad * grad_scale (the clipping coefficient)."""
    kept = [(r, h) for r, h in zip(rows, hyper) if r[0].numel()]
    if not kept:
        return
    rows, hyper = [r for r, _ in kept], [h for _, h in kept]
    has_out = len(rows[0]) == 5
    kernel, dtypes = _kernel()
    table = table or _Table()
    if any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("adamw: a model param for every row or for none")
    table.update([r if has_out else (*r, r[0]) for r in rows], rows[0][0].device)
    beta1, beta2 = betas
    scalars = torch.tensor([(1.0 - lr * wd, lr / (1.0 - beta1 ** step), math.sqrt(1.0 - beta2 ** step))
                            for lr, wd, step in hyper], dtype=torch.float32).to(rows[0][0].device, non_blocking=True)
    first = rows[0]
    kernel[(table.block_tensor.numel(),)](
        table.ptrs, table.sizes, table.block_tensor, table.block_start, scalars, grad_scale, beta1, beta2, eps,
        G=dtypes[first[1].dtype], S=dtypes[first[2].dtype], O=dtypes[first[4].dtype] if has_out else dtypes[torch.float32],
        HAS_OUT=has_out, ALIGNED=table.aligned, BLOCK=_BLOCK, num_warps=8)


def adamw_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
           model_param: torch.Tensor | None, *, lr: float, betas: tuple[float, float], eps: float,
           weight_decay: float, step: int, grad_scale: float = 1.0) -> None:
    """adamw_multi_ on one tensor."""
    row = (param, grad, exp_avg, exp_avg_sq) + ((model_param,) if model_param is not None else ())
    adamw_multi_([row], [(lr, weight_decay, step)], betas=betas, eps=eps, grad_scale=grad_scale)


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
        self.tables: dict[tuple, _Table] = {}  # per launch kind, reused while no address changes
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
        launches: dict[tuple, tuple[list, list]] = {}  # one launch per (model param?, betas, eps, dtypes)
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                grad = self.grads.get(id(p))
                if grad is None:
                    continue
                st = self._state(p)
                st["step"] += 1
                out = self.model_params.get(id(p))
                row = (p, grad, st["exp_avg"], st["exp_avg_sq"]) + ((out,) if out is not None else ())
                key = (out is not None, tuple(group["betas"]), group["eps"], grad.dtype)
                rows, hyper = launches.setdefault(key, ([], []))
                rows.append(row)
                hyper.append((group["lr"], group["weight_decay"], int(st["step"])))
        for key, (rows, hyper) in launches.items():
            adamw_multi_(rows, hyper, betas=key[1], eps=key[2], grad_scale=self.grad_scale,
                         table=self.tables.setdefault(key, _Table()))
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
