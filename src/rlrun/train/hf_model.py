"""rlrun `model.*` fields -> a transformers config and causal LM (random init or checkpoint.hf).

The trainer and the hf rollout engine must hold the very same architecture, so both build it
here. Random init runs under a fixed seed, so every DP rank starts from identical weights
without a broadcast.
"""
from __future__ import annotations

import torch
import transformers

from rlrun.config.families import FAMILIES

# rlrun family -> (transformers config class, the architecture name written to config.json)
# (from the one registry, rlrun.config.families: Family.hf_config)
_FAMILIES = {name: (getattr(transformers, f.hf_config), f.hf_arch) for name, f in FAMILIES.items() if f.hf_config}


def hf_config(model) -> transformers.PretrainedConfig:
    """Map the resolved `model` section to the transformers config of its family."""
    if model.family not in _FAMILIES:
        raise ValueError(f"model.family={model.family!r} has no transformers mapping in the torch backend; "
                         f"supported: {', '.join(_FAMILIES)} (deepseek_v3 runs on train.backend=megatron)")
    cls, arch = _FAMILIES[model.family]
    rope = {"rope_type": "default", "rope_theta": float(model.rotary_base)}
    if model.rope_scaling_factor != 1.0:
        # llama3.1-style scaling; the other factors are llama3.1's published values.
        rope = {"rope_type": "llama3", "rope_theta": float(model.rotary_base), "factor": float(model.rope_scaling_factor),
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if model.rotary_percent != 1.0:
        rope["partial_rotary_factor"] = float(model.rotary_percent)
    kw = dict(
        vocab_size=model.vocab_size, hidden_size=model.hidden_size, intermediate_size=model.ffn_hidden_size,
        num_hidden_layers=model.num_layers, num_attention_heads=model.num_attention_heads,
        num_key_value_heads=model.num_query_groups, head_dim=model.head_dim,
        max_position_embeddings=model.max_position_embeddings, rms_norm_eps=model.norm_epsilon,
        tie_word_embeddings=model.tie_word_embeddings, rope_parameters=rope, attention_bias=model.add_qkv_bias,
        architectures=[arch],
    )
    if model.family == "qwen3_moe":
        moe = model.moe
        kw.update(num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                  moe_intermediate_size=moe.expert_ffn_hidden_size, norm_topk_prob=True,
                  mlp_only_layers=list(range(moe.first_k_dense)))
    if model.family == "deepseek_v3":
        moe, mla = model.moe, model.mla
        if model.rope_scaling_factor != 1.0:  # YaRN, DeepSeek-V3's published values besides the factor
            rope = {"rope_type": "yarn", "rope_theta": float(model.rotary_base), "factor": float(model.rope_scaling_factor),
                    "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                    "mscale_all_dim": 1.0}
        kw.update(rope_parameters=rope, n_routed_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                  moe_intermediate_size=moe.expert_ffn_hidden_size, first_k_dense_replace=moe.first_k_dense,
                  n_shared_experts=moe.shared_expert_ffn_hidden_size // moe.expert_ffn_hidden_size,
                  n_group=moe.n_group, topk_group=moe.topk_group, norm_topk_prob=True,
                  q_lora_rank=mla.q_lora_rank, kv_lora_rank=mla.kv_lora_rank, qk_nope_head_dim=mla.qk_nope_head_dim,
                  qk_rope_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
                  head_dim=mla.qk_rope_head_dim)  # transformers' DeepseekV3: head_dim is the rope part
    return cls(**kw)


def checkpoint_names(state: dict) -> dict:
    """A transformers state dict in the names of HF checkpoints on disk (what SGLang and the
    megatron mapping read): transformers >= 5 keeps a MoE layer's experts fused in memory
    (`mlp.experts.gate_up_proj` [E, 2I, H] with gate rows first, `mlp.experts.down_proj` [E, H, I]);
    checkpoints store `mlp.experts.{e}.gate_proj/up_proj/down_proj.weight` per expert. Other
    tensors pass through (views, no copies)."""
    out = {}
    for name, t in state.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            pre = name[: -len("gate_up_proj")]
            for e, w in enumerate(t):
                out[f"{pre}{e}.gate_proj.weight"], out[f"{pre}{e}.up_proj.weight"] = w.chunk(2, dim=0)
        elif name.endswith("mlp.experts.down_proj"):
            pre = name[: -len("down_proj")]
            for e, w in enumerate(t):
                out[f"{pre}{e}.down_proj.weight"] = w
        else:
            out[name] = t
    return out


def build_causal_lm(model, hf_path: str | None, seed: int, dtype: torch.dtype = torch.float32):
    """checkpoint.hf when given, else random init of the `model` architecture under `seed`."""
    if hf_path:
        return transformers.AutoModelForCausalLM.from_pretrained(hf_path, dtype=dtype, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(hf_config(model), dtype=dtype, attn_implementation="sdpa")
