"""rlrun.train.megatron.adam: the fused AdamW kernel against torch.optim.AdamW (run through Triton's
interpreter on the CPU; the GPU run is tests/gpu/test_megatron_kernels.py), and its state handling."""
import pytest
import torch
from triton_interpreter import needs_triton, run_interpreted as _interpreted

from rlrun.train.megatron import adam


@needs_triton
def test_fp32_steps_match_torch_adamw_with_decay_clip_scale_and_bias_correction():
    errs = _interpreted("""
        import torch
        from rlrun.train.megatron import adam
        torch.manual_seed(0)
        n = 4096 + 1000                      # two kernel blocks, the second one masked
        p0 = torch.randn(n)
        ref = torch.nn.Parameter(p0.clone())
        opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
        p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
        out = torch.full((n,), float("nan"))
        errs = []
        for step, scale in ((1, 1.0), (2, 0.25), (3, 1.0)):
            g = torch.randn(n)
            ref.grad = g * scale             # what megatron-core's in-place clip leaves
            opt.step()
            adam.adamw_(p, g, m, v, out, lr=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1, step=step,
                        grad_scale=scale)
            st = opt.state[ref]
            rel = lambda a, b: float((a - b).norm() / b.norm())
            errs += [rel(p, ref.detach()), rel(m, st["exp_avg"]), rel(v, st["exp_avg_sq"])]
        moved = float((p - p0).norm() / p0.norm())
        print(max(errs), float((out - p).abs().max()), moved)
    """)
    err, out_err, moved = errs
    assert err < 1e-6          # same fp32 arithmetic, up to the order of a few operations
    assert out_err == 0.0      # the model-param output is the master weight (fp32 out: a plain store)
    assert moved > 1e-3        # the three steps did move the weights (lr 1e-2, ~|update| 1e-2 each)


@needs_triton
def test_bf16_grads_and_moments_stay_close_to_float64_adamw():
    errs = _interpreted("""
        import torch
        from rlrun.train.megatron import adam
        torch.manual_seed(1)
        n = 3000
        p0 = torch.randn(n)
        p = p0.clone()
        m, v = torch.zeros(n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.bfloat16)
        out = torch.zeros(n, dtype=torch.bfloat16)
        ref = torch.nn.Parameter(p0.double())
        opt = torch.optim.AdamW([ref], lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)
        for step in (1, 2, 3, 4):
            g = torch.randn(n).bfloat16()
            ref.grad = g.double()
            opt.step()
            adam.adamw_(p, g, m, v, out, lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0, step=step)
        update, ref_update = p.double() - p0.double(), ref.detach() - p0.double()
        print(float((update - ref_update).norm() / ref_update.norm()),
              float((out.double() - p.double()).abs().max()), float(p.abs().max()))
    """)
    update_err, out_err, biggest = errs
    assert update_err < 2e-2   # the updates through bf16 moments, against float64 AdamW
    assert out_err <= biggest * 2 ** -7  # bf16 model params: the master weights within one bf16 ulp


def _fused_step(state_dtype=torch.bfloat16):
    p = torch.nn.Parameter(torch.randn(6))
    opt = torch.optim.AdamW([p], lr=1e-3, fused=False)
    return p, opt, adam.FusedAdamWStep(opt, {}, state_dtype)


def test_loaded_state_is_cast_back_to_the_configured_moment_dtype_and_step_stays_on_the_host():
    p, opt, step = _fused_step()
    opt.state[p].update(step=torch.tensor(3.0), exp_avg=torch.ones(6, dtype=torch.bfloat16),
                        exp_avg_sq=torch.ones(6, dtype=torch.bfloat16))
    saved = opt.state_dict()
    assert saved["state"][0]["exp_avg"].dtype == torch.bfloat16
    opt.load_state_dict(saved)  # torch casts the moments to the param's dtype (fp32) here
    assert opt.state[p]["exp_avg"].dtype == torch.float32
    st = step._state(p)
    assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.bfloat16
    assert st["step"].device.type == "cpu" and float(st["step"]) == 3.0
    assert torch.equal(st["exp_avg"], torch.ones(6, dtype=torch.bfloat16))


def test_new_state_has_the_configured_dtype_and_refuses_what_the_kernel_does_not_do():
    p, opt, step = _fused_step(torch.float32)
    st = step._state(p)
    assert st["exp_avg"].dtype == torch.float32 and float(st["step"]) == 0.0 and not st["exp_avg"].any()
    with pytest.raises(TypeError, match="torch.optim.AdamW"):
        adam.FusedAdamWStep(torch.optim.Adam([p]), {}, torch.float32)
    with pytest.raises(ValueError, match="amsgrad"):
        adam.FusedAdamWStep(torch.optim.AdamW([p], amsgrad=True), {}, torch.float32)


def test_adamw_refuses_tensors_of_another_size():
    with pytest.raises(ValueError, match="exp_avg has 5 elements"):  # checked before Triton is needed
        adam.adamw_(torch.zeros(6), torch.zeros(6), torch.zeros(5), torch.zeros(6), None, lr=1e-3,
                    betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0, step=1)


def test_clip_hook_scales_fused_shards_in_the_kernel_and_clips_the_rest_in_place():
    calls = []

    def megatron_clip(params, max_norm, total_norm, use_decoupled_grad=False):
        calls.append((len(params), max_norm, total_norm))

    hook = adam._clip_hook(megatron_clip)
    owned, other = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    _, _, step = _fused_step()
    setattr(owned, adam._OWNER, step)
    hook([owned, other], 1.0, 4.0)
    assert step.grad_scale == pytest.approx(1.0 / (4.0 + 1e-6))
    assert calls == [(1, 1.0, 4.0)]  # only the shard without a fused step goes to megatron-core's clip
    step.grad_scale = 1.0
    hook([owned], 1.0, 0.5)  # below max_norm: no clipping (megatron-core's rule), nothing to pass on
    assert step.grad_scale == 1.0 and len(calls) == 1
