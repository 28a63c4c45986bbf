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


def test_the_memory_estimate_counts_what_the_quantize_step_quantizes():
    """rlrun.config.memory.engine_weight_bytes with rollout.fp8: 1 B/param (+ a float32 scale per 128 x 128 block)
    for exactly the tensors quantize_named quantizes in the transformers model of the same model.* section (built
    on the meta device), 2 B for the rest."""
    import math

    from rlrun.config import load
    from rlrun.config.memory import engine_weight_bytes
    from rlrun.config.params import count_params
    from rlrun.rollout.fp8 import quantizes
    from rlrun.train.hf_model import hf_config

    import transformers
    for model in ("tiny-moe", "qwen3-4b"):
        m = load(["hardware=cpu", f"model={model}"]).model
        with torch.device("meta"):
            hf = transformers.AutoModelForCausalLM.from_config(hf_config(m))
        quantized = kept = 0
        for name, p in hf.named_parameters():
            if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
                quantized += p.numel()  # fused in memory; per-expert *_proj.weight on the wire (checkpoint_names)
            elif quantizes(name, p):
                quantized += p.numel()
            else:
                kept += p.numel()
        pc = count_params(m)
        assert quantized + kept == pc.total
        want = 2 * kept + quantized + 4 * quantized / 128 ** 2
        assert math.isclose(engine_weight_bytes(m, pc, fp8=True), want, rel_tol=1e-12), model
        assert engine_weight_bytes(m, pc, fp8=False) == 2 * pc.total
        assert engine_weight_bytes(m, pc, fp8=True) < 0.6 * 2 * pc.total or model == "tiny-moe"


def test_validate_refuses_fp8_rollout_where_it_cannot_work():
    import pytest

    from rlrun.config import ConfigError, load

    def problems(*overrides):
        with pytest.raises(ConfigError) as e:
            load(["rollout.fp8=true", *overrides])
        return [p.message for p in e.value.problems if p.path == "rollout.fp8"]

    cpu = problems("hardware=cpu")  # the hf engine on hardware without FP8
    assert any("no FP8 matrix units" in m for m in cpu) and any("engine=hf does not serve FP8" in m for m in cpu)
    gpu_hf = problems("hardware=h100", "rollout.engine=hf", "model=qwen3-4b", "checkpoint.hf=/m")
    assert any("engine=hf does not serve FP8" in m for m in gpu_hf) and not any("FP8 matrix" in m for m in gpu_hf)
    sglang = problems("hardware=h100", "rollout.engine=sglang", "model=qwen3-4b", "checkpoint.hf=/m")
    assert sglang == [m for m in sglang if "does not push FP8 weights yet" in m] and sglang
