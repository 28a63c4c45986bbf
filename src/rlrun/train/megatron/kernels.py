"""Fused GPU kernels for the megatron backend's local (no Transformer Engine) layer spec.

Without TE, megatron-core's local modules run RMSNorm and the gated-SiLU MLP activation as
chains of PyTorch ops: the RMSNorm weight gradient alone is a 12.5 ms reduction per step of
Qwen3-1.7B at 4096 tokens on one H100, and SwiGLU's backward is five kernels plus a concat of
the two halves' gradients (docs/benchmarks.md). Here:

- `rms_norm`: Liger-Kernel's Triton RMSNorm (a maintained library of such kernels) in its
  "llama" casting mode - fp32 statistics, the normalised input cast back to the input dtype and
  then scaled, which is what transformers' Qwen3/Llama/GLM-4 RMSNorm computes. Its weight
  gradient is reduced per SM in fp32.
- `swiglu`: silu(gate) * up over megatron-core's fused [tokens, 2 * ffn] fc1 output, one Triton
  kernel forward and one backward that writes the [tokens, 2 * ffn] input gradient directly.
  Liger's SwiGLU takes gate and up as two contiguous tensors; this layout would need two copies
  in and a concat out, which is what the kernel is here to avoid.

Both are used on CUDA tensors when Triton (and for RMSNorm, liger-kernel) imports, and when
`ENABLED` (a module switch for the step profiler, tools/device/profile_step.py); otherwise the
callers keep PyTorch's ops.
"""
from __future__ import annotations

import functools

import torch

ENABLED = True


@functools.cache
def _liger_rms_norm():
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None
    return LigerRMSNormFunction


def rms_norm_available(x: torch.Tensor) -> bool:
    return ENABLED and x.is_cuda and _liger_rms_norm() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, grad_in_place: bool) -> torch.Tensor:
    """RMSNorm with Liger's kernels. grad_in_place: the backward may overwrite the incoming
    gradient with the input gradient (saves a buffer); only where nothing else reads that
    gradient, i.e. not where the norm's output feeds a residual add directly."""
    return _liger_rms_norm().apply(x, weight, eps, 0.0, "llama", grad_in_place)


@functools.cache
def _triton_swiglu():
    """(forward, backward) kernels, or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def fwd(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        gate = tl.load(x_ptr + row * 2 * n_cols + cols, mask=mask, other=0.0)
        up = tl.load(x_ptr + row * 2 * n_cols + n_cols + cols, mask=mask, other=0.0)
        g = gate.to(tl.float32)
        # transformers: act_fn(gate) * up, each rounded to the input dtype
        act = (g * tl.sigmoid(g)).to(up.dtype)
        tl.store(y_ptr + row * n_cols + cols, (act.to(tl.float32) * up.to(tl.float32)).to(up.dtype), mask=mask)

    @triton.jit
    def bwd(x_ptr, dy_ptr, dx_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        gate = tl.load(x_ptr + row * 2 * n_cols + cols, mask=mask, other=0.0)
        up = tl.load(x_ptr + row * 2 * n_cols + n_cols + cols, mask=mask, other=0.0)
        dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        g = gate.to(tl.float32)
        sig = tl.sigmoid(g)
        act = (g * sig).to(up.dtype).to(tl.float32)
        d_act = (dy * up.to(tl.float32)).to(up.dtype).to(tl.float32)
        d_gate = d_act * sig * (1.0 + g * (1.0 - sig))
        tl.store(dx_ptr + row * 2 * n_cols + cols, d_gate.to(up.dtype), mask=mask)
        tl.store(dx_ptr + row * 2 * n_cols + n_cols + cols, (dy * act).to(up.dtype), mask=mask)

    return fwd, bwd


_BLOCK = 1024


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        fwd, _ = _triton_swiglu()
        rows, n = x.shape[0], x.shape[1] // 2
        y = x.new_empty(rows, n)
        fwd[(rows, -(-n // _BLOCK))](x, y, n, BLOCK=_BLOCK)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, dy):
        _, bwd = _triton_swiglu()
        (x,) = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(x)
        rows, n = dy.shape
        bwd[(rows, -(-n // _BLOCK))](x, dy, dx, n, BLOCK=_BLOCK)
        return dx


def swiglu_reference(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def swiglu(x: torch.Tensor, bias=None, fp8_input_store: bool = False, cpu_offload_input: bool = False):
    """megatron-core's bias_swiglu_impl signature (megatron.core.fusions.fused_bias_swiglu), which
    its MLP calls when config.bias_activation_fusion is set: x [..., 2 * ffn] -> [..., ffn]."""
    if bias is not None or fp8_input_store or cpu_offload_input:
        raise NotImplementedError("rlrun's SwiGLU kernel: no bias, no FP8 input store, no activation offload "
                                  "(none is used by the layer spec of the megatron backend)")
    if not (ENABLED and x.is_cuda and _triton_swiglu() is not None):
        return swiglu_reference(x)
    shape = x.shape
    y = _SwiGLU.apply(x.reshape(-1, shape[-1]).contiguous())
    return y.view(*shape[:-1], shape[-1] // 2)


def install_swiglu() -> bool:
    """Make megatron-core's MLP call `swiglu` for its fused activation path; the caller sets
    config.bias_activation_fusion. False when there is no Triton (PyTorch's ops stay)."""
    if not ENABLED or _triton_swiglu() is None:
        return False
    from megatron.core.transformer import mlp
    mlp.bias_swiglu_impl = swiglu
    return True
