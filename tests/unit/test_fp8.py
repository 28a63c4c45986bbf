"""Block-wise FP8 e4m3 quantization of a weight sync (rlrun.rollout.fp8): the round trip stays within the bound
e4m3's 3 mantissa bits give (module docstring of rlrun.rollout.fp8), one scale per 128 x 128 block, and the
names an FP8 engine loads (slime's quantizer_fp8.py list, `weight_scale_inv`)."""
from __future__ import annotations

import torch

from rlrun.rollout.fp8 import E4M3_MAX, dequantize_blockwise, quantize_blockwise, quantize_named


def test_round_trip_error_is_within_half_an_e4m3_ulp():
    g = torch.Generator().manual_seed(0)
    # 300 x 200: partial edge blocks; one block scaled 1000x larger, so that blocks need their own scales
    w = torch.randn(300, 200, generator=g) * 0.02
    w[:128, :128] *= 1000.0
    q, scale = quantize_blockwise(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape and scale.shape == (3, 2)
    assert torch.allclose(scale[0, 0], w[:128, :128].abs().max() / E4M3_MAX)
    back = dequantize_blockwise(q, scale)
    per_elem_scale = scale.repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)[:, :200]
    bound = torch.maximum(w.abs() * 2.0 ** -4, per_elem_scale * 2.0 ** -10)
    err = (back - w).abs()
    assert (err <= bound * (1 + 1e-6)).all()
    # and the bound is not loose: rounding uses most of it somewhere (relative error near 2^-4 = 0.0625)
    rel = (err / w.abs().clamp(min=1e-30))[w.abs() > per_elem_scale * 2.0 ** -6]
    assert rel.max() > 0.05
    # each block's largest value maps to e4m3's largest (448) exactly
    assert q.float()[:128, :128].abs().max().item() == E4M3_MAX


def test_only_linear_weights_are_quantized_with_their_scales():
    named = [("model.embed_tokens.weight", torch.randn(64, 32)),
             ("model.layers.0.self_attn.q_proj.weight", torch.randn(32, 32)),
             ("model.layers.0.input_layernorm.weight", torch.ones(32)),
             ("model.layers.0.mlp.gate.weight", torch.randn(8, 32)),
             ("model.layers.0.mlp.experts.3.down_proj.weight", torch.randn(32, 16)),
             ("lm_head.weight", torch.randn(64, 32))]
    out = dict(quantize_named(named))
    assert list(out) == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                         "model.layers.0.self_attn.q_proj.weight_scale_inv", "model.layers.0.input_layernorm.weight",
                         "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.3.down_proj.weight",
                         "model.layers.0.mlp.experts.3.down_proj.weight_scale_inv", "lm_head.weight"]
    assert out["model.layers.0.mlp.experts.3.down_proj.weight"].dtype == torch.float8_e4m3fn
    assert out["model.layers.0.mlp.experts.3.down_proj.weight_scale_inv"].shape == (1, 1)
    assert out["model.layers.0.mlp.gate.weight"].dtype == torch.float32  # the router stays in the training dtype
