"""rlrun.train.megatron.kernels on the GPU: Liger's RMSNorm and the Triton SwiGLU against the
PyTorch ops transformers runs (bf16 forward and gradients; fp32 for the exact math)."""
import pytest
import torch

from rlrun.train.megatron import kernels


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def _hf_rms_norm(x, w, eps):
    """transformers' Qwen3RMSNorm.forward."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(4096, 2048), (4096, 16, 128)], ids=["hidden", "qk-norm"])
def test_rms_norm_matches_transformers(shape, dtype, tol):
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(shape[-1], device="cuda", dtype=dtype)).requires_grad_()
    dy = torch.randn(*shape, device="cuda", dtype=dtype)
    assert kernels.rms_norm_available(x)
    out = kernels.rms_norm(x, w, 1e-6, grad_in_place=False)
    gx, gw = torch.autograd.grad(out, (x, w), dy.clone())
    ref = _hf_rms_norm(x, w, 1e-6)
    rx, rw = torch.autograd.grad(ref, (x, w), dy)
    errs = _rel(out, ref), _rel(gx, rx), _rel(gw, rw)
    print(f"KERNEL rms_norm {shape} {dtype}: out {errs[0]:.2e} dx {errs[1]:.2e} dw {errs[2]:.2e}")
    assert max(errs) < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
def test_swiglu_matches_torch(dtype, tol):
    torch.manual_seed(1)
    x = torch.randn(4096, 2 * 6144, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(4096, 6144, device="cuda", dtype=dtype)
    out = kernels.swiglu(x)
    (gx,) = torch.autograd.grad(out, x, dy)
    ref = kernels.swiglu_reference(x)
    (rx,) = torch.autograd.grad(ref, x, dy)
    errs = _rel(out, ref), _rel(gx, rx)
    print(f"KERNEL swiglu {dtype}: out {errs[0]:.2e} dx {errs[1]:.2e}")
    assert max(errs) < tol
    if dtype == torch.bfloat16:  # rounded like transformers' silu(gate) * up: at most 1 ulp apart
        assert (out.float() - ref.float()).abs().le(ref.float().abs() * 2 ** -7 + 1e-6).all()


def test_linear_logp_entropy_triton_path_matches_torch_path(monkeypatch):
    """rlrun.algo.token_kernels (bf16 logits read by Triton) vs token_stats' fp32 torch passes, at
    the Qwen3-1.7B vocabulary: the same bf16-rounded logits, so differences are summation order."""
    from rlrun.algo import token_kernels, token_stats
    torch.manual_seed(2)
    hidden = (torch.randn(1500, 2048, device="cuda") * 0.5).bfloat16().requires_grad_()
    weight = (torch.randn(151936, 2048, device="cuda") * 0.02).bfloat16().requires_grad_()
    targets = torch.randint(0, 151936, (1500,), device="cuda")
    g_logp, g_h = torch.randn(1500, device="cuda"), torch.randn(1500, device="cuda")
    out = {}
    for fused in (False, True):
        monkeypatch.setattr(token_kernels, "available", lambda t, fused=fused: fused)
        lp, h = token_stats.linear_logp_entropy(hidden, weight, targets)
        gh, gw = torch.autograd.grad((lp * g_logp).sum() + (h * g_h).sum(), (hidden, weight))
        out[fused] = (lp, h, gh, gw)
    errs = [_rel(a, b) for a, b in zip(out[True], out[False])]
    print("KERNEL linear_logp_entropy triton vs torch: logp {:.2e} entropy {:.2e} d_hidden {:.2e} d_weight {:.2e}"
          .format(*errs))
    assert max(errs[:2]) < 1e-5 and max(errs[2:]) < 1e-2


@pytest.mark.parametrize("state", [torch.float32, torch.bfloat16], ids=["fp32-moments", "bf16-moments"])
def test_fused_adamw_matches_torch_adamw_on_the_gpu(state):
    """rlrun.train.megatron.adam.adamw_ against torch.optim.AdamW(fused=True) over 3 steps, one of
    them clipped (grad_scale); the bf16 model-param output is the master weight rounded to nearest."""
    from rlrun.train.megatron import adam
    torch.manual_seed(2)
    n = 5_000_003  # many blocks, the last one masked
    p0 = torch.randn(n, device="cuda") * 0.02
    ref = torch.nn.Parameter(p0.clone())
    opt = torch.optim.AdamW([ref], lr=1e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1, fused=True)
    p = p0.clone()
    m, v = torch.zeros(n, device="cuda", dtype=state), torch.zeros(n, device="cuda", dtype=state)
    out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    for step, scale in ((1, 1.0), (2, 0.3), (3, 1.0)):
        g = torch.randn(n, device="cuda") * 1e-3
        ref.grad = g * scale
        opt.step()
        adam.adamw_(p, g, m, v, out, lr=1e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1, step=step,
                    grad_scale=scale)
    update, ref_update = p - p0, ref.detach() - p0
    err = _rel(update, ref_update)
    print(f"KERNEL adamw {state}: update rel err {err:.2e}, weights {_rel(p, ref.detach()):.2e}")
    # fp32: the updates (~1e-4) sit on weights of ~0.02, whose fp32 ulp is 2e-9: one ulp of a
    # weight is ~2e-5 of its update (8.5e-6 measured on the H100, 2026-11-22)
    assert err < (3e-5 if state == torch.float32 else 2e-2)
    assert _rel(p, ref.detach()) < (1e-7 if state == torch.float32 else 1e-4)
    assert torch.equal(out, p.to(torch.bfloat16))
