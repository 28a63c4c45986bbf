"""Parameter counts from model.* alone (no torch): total and active (MoE: top-k routed + shared experts),
equal to what transformers builds for the same architecture (tested on the meta device), plus the
per-layer split that the memory estimate shards over TP/PP/EP."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from rlrun.config.schema import ModelSection


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int
    embedding: int          # input embedding (V*H)
    lm_head: int            # output layer (0 when tied to the embedding)
    dense_layer: int        # one dense transformer layer (attention + MLP + norms)
    moe_layer_shared: int   # one MoE layer without its routed experts (attention, router, shared expert, norms)
    expert: int             # one routed expert
    num_dense_layers: int
    num_moe_layers: int
    final_norm: int

    def to_dict(self) -> dict:
        return asdict(self)


def attention_params(m: ModelSection) -> int:
    h, hd, heads, kv = m.hidden_size, m.head_dim, m.num_attention_heads, m.num_query_groups
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = h * heads * qk if a.q_lora_rank is None else h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * qk
        kv_proj = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank + a.kv_lora_rank * heads * (
            a.qk_nope_head_dim + a.v_head_dim)
        return q + kv_proj + heads * a.v_head_dim * h
    qkv = h * (heads + 2 * kv) * hd + ((heads + 2 * kv) * hd if m.add_qkv_bias else 0)
    qk_norm = 2 * hd if m.qk_layernorm else 0
    return qkv + heads * hd * h + qk_norm


def mlp_params(h: int, ffn: int, swiglu: bool) -> int:
    return (3 if swiglu else 2) * h * ffn


def norms_per_layer(m: ModelSection) -> int:
    # input + post-attention norms; GLM-4 adds post-self-attention and post-MLP norms.
    return (4 if m.post_norms else 2) * m.hidden_size


def count_params(m: ModelSection) -> ParamCount:
    h = m.hidden_size
    attn, norms = attention_params(m), norms_per_layer(m)
    dense_layer = attn + mlp_params(h, m.ffn_hidden_size, m.swiglu) + norms
    embedding = m.vocab_size * h
    lm_head = 0 if m.tie_word_embeddings else m.vocab_size * h
    if m.moe is None:
        n_dense, n_moe, moe_shared, expert, active_experts = m.num_layers, 0, 0, 0, 0
    else:
        e = m.moe
        n_dense, n_moe = e.first_k_dense, m.num_layers - e.first_k_dense
        shared = mlp_params(h, e.shared_expert_ffn_hidden_size, m.swiglu) if e.shared_expert_ffn_hidden_size else 0
        moe_shared = attn + norms + h * e.num_experts + shared  # router: one logit per expert
        expert = mlp_params(h, e.expert_ffn_hidden_size, m.swiglu)
        active_experts = e.top_k
    common = embedding + lm_head + h + n_dense * dense_layer + n_moe * moe_shared
    total = common + n_moe * (m.moe.num_experts if m.moe else 0) * expert
    return ParamCount(total=total, active=common + n_moe * active_experts * expert, embedding=embedding,
                      lm_head=lm_head, dense_layer=dense_layer, moe_layer_shared=moe_shared, expert=expert,
                      num_dense_layers=n_dense, num_moe_layers=n_moe, final_norm=h)


def lora_shapes(m: ModelSection) -> dict[str, tuple[int, int]]:
    """(in, out) features of the linear layers LoRA can target, by their HF module name (dense attention and
    MLP; llama/qwen/glm4 names). gate_proj/up_proj exist with SwiGLU only."""
    h, hd, heads, kv, ffn = m.hidden_size, m.head_dim, m.num_attention_heads, m.num_query_groups, m.ffn_hidden_size
    shapes = {"q_proj": (h, heads * hd), "k_proj": (h, kv * hd), "v_proj": (h, kv * hd), "o_proj": (heads * hd, h),
              "up_proj": (h, ffn), "down_proj": (ffn, h)}
    if m.swiglu:
        shapes["gate_proj"] = (h, ffn)
    return shapes


def lora_saved_modules(m: ModelSection) -> dict[str, int]:
    """HF names of the modules besides the linear layers that model.lora.modules_to_save may train whole (layer 0
    stands for every layer) -> their parameters in the whole model: embeddings, output layer, norms."""
    layer, h, L = "model.layers.0.", m.hidden_size, m.num_layers
    names = {"model.embed_tokens": m.vocab_size * h, "lm_head": 0 if m.tie_word_embeddings else m.vocab_size * h,
             "model.norm": h, layer + "input_layernorm": L * h, layer + "post_attention_layernorm": L * h}
    if m.qk_layernorm:
        names.update({layer + "self_attn.q_norm": L * m.head_dim, layer + "self_attn.k_norm": L * m.head_dim})
    if m.post_norms:
        names.update({layer + "post_self_attn_layernorm": L * h, layer + "post_mlp_layernorm": L * h})
    return names


def lora_saves(name: str, entry: str) -> bool:
    """peft's modules_to_save match: the module's name ends with the entry (at a dot)."""
    return name == entry or name.endswith("." + entry)


def lora_params(m: ModelSection) -> int:
    """Parameters of the LoRA adapter model.lora describes: rank * (in + out) per targeted layer (A and B), plus
    the modules it trains whole (model.lora.modules_to_save); 0 when LoRA is off."""
    r = m.lora.rank
    shapes = lora_shapes(m)
    saved = sum(n for name, n in lora_saved_modules(m).items() if any(lora_saves(name, t) for t in m.lora.modules_to_save))
    return sum(m.num_layers * r * sum(shapes[t]) for t in m.lora.target_modules if t in shapes) + (saved if r else 0)
