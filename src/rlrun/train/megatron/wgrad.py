"""Gradient-accumulation fusion without Apex: the weight-gradient GEMM accumulates straight into
the fp32 `main_grad` buffer.

megatron-core's linear layers do `main_grad += grad_output^T @ input` in one cuBLAS call when
`gradient_accumulation_fusion` is on, through Apex's `fused_weight_gradient_mlp_cuda` extension.
Without it (no Apex wheel for the lent GPUs' torch, none on ROCm images) they compute a bf16
weight gradient, which the DDP hook then adds into the fp32 buffer: one extra bf16 tensor per
weight and a read-add-write pass over the fp32 buffer per micro-batch.

torch >= 2.8 has the same GEMM on CUDA: `addmm` with `out_dtype=float32` on bf16/fp16 inputs, with
C (the fp32 main_grad) as both the addend and the output, i.e. cuBLAS with beta=1. `install()`
gives megatron-core that function under the extension's name when the extension is missing.
"""
from __future__ import annotations

import torch


class TorchWgrad:
    """The two entry points of Apex's fused_weight_gradient_mlp_cuda, on torch.addmm."""

    @staticmethod
    def wgrad_gemm_accum_fp32(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor):
        # total_input [tokens, in], grad_output [tokens, out] (megatron flattens them to 2-D first)
        torch.addmm(main_grad, grad_output.t(), total_input, out_dtype=torch.float32, out=main_grad)

    @staticmethod
    def wgrad_gemm_accum_fp16(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor):
        main_grad.addmm_(grad_output.t(), total_input)  # same dtype throughout: plain addmm


def torch_wgrad_works(device) -> bool:
    """Whether this torch runs the mixed-dtype addmm on `device` and gets it right (a 2x3x4 check:
    the op exists only for CUDA builds of torch >= 2.8, and a wrong answer must not train)."""
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(3, 2, generator=g).to(device, torch.bfloat16)
        b = torch.randn(3, 4, generator=g).to(device, torch.bfloat16)
        c = torch.randn(2, 4, generator=g).to(device)
        want = c + a.float().t() @ b.float()
        TorchWgrad.wgrad_gemm_accum_fp32(b, a, c)
        return bool(torch.allclose(c, want, rtol=1e-2, atol=1e-2))
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def install(device) -> str:
    """Make megatron-core's gradient-accumulation fusion usable; returns which kernel it will use
    ("apex" or "torch"). Raises with the config fix when neither works here. Must run before the
    model is built (ColumnParallelLinear checks availability in its constructor)."""
    from megatron.core.tensor_parallel import layers

    if layers._grad_accum_fusion_available:
        return "apex"
    if not torch_wgrad_works(device):
        raise ValueError(
            f"train.gradient_accumulation_fusion=true: neither Apex's fused_weight_gradient_mlp_cuda nor torch's "
            f"addmm(out_dtype=float32) (torch >= 2.8 on CUDA; this is {torch.__version__} on {device}) is available: "
            f"set train.gradient_accumulation_fusion=false")
    layers.fused_weight_gradient_mlp_cuda = TorchWgrad
    layers._grad_accum_fusion_available = True
    return "torch"
