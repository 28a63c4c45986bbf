"""Parameter counts from model.* equal transformers' count for the same architecture, built on the meta
device (no memory). The test imports torch/transformers; rlrun.config.params does not. MoE giants are
built with fewer layers (dense and MoE layers both kept) so that module construction stays fast: the count
is per-layer arithmetic, so this checks every term."""
import pytest

from rlrun.config import load
from rlrun.config.params import count_params

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def hf_config(m):
    common = dict(vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.ffn_hidden_size,
                  num_hidden_layers=m.num_layers, num_attention_heads=m.num_attention_heads,
                  num_key_value_heads=m.num_query_groups, rms_norm_eps=m.norm_epsilon,
                  tie_word_embeddings=m.tie_word_embeddings, max_position_embeddings=m.max_position_embeddings)
    if m.family == "qwen3":
        return transformers.Qwen3Config(head_dim=m.head_dim, **common)
    if m.family == "llama":
        return transformers.LlamaConfig(head_dim=m.head_dim, attention_bias=m.add_qkv_bias, **common)
    if m.family == "glm4":
        return transformers.Glm4Config(head_dim=m.head_dim, attention_bias=m.add_qkv_bias, **common)
    if m.family == "qwen2":  # q/k/v bias hard-wired; head dim = hidden / heads
        return transformers.Qwen2Config(**common)
    if m.family == "mistral":
        return transformers.MistralConfig(head_dim=m.head_dim, **common)
    if m.family == "phi3":  # fused qkv_proj and gate_up_proj: the same counts
        return transformers.Phi3Config(**common)
    if m.family == "qwen3_moe":
        e = m.moe
        return transformers.Qwen3MoeConfig(head_dim=m.head_dim, num_experts=e.num_experts, num_experts_per_tok=e.top_k,
                                           moe_intermediate_size=e.expert_ffn_hidden_size, **common)
    if m.family == "deepseek_v3":
        e, a = m.moe, m.mla
        return transformers.DeepseekV3Config(
            n_routed_experts=e.num_experts, num_experts_per_tok=e.top_k, moe_intermediate_size=e.expert_ffn_hidden_size,
            n_shared_experts=e.shared_expert_ffn_hidden_size // e.expert_ffn_hidden_size,
            first_k_dense_replace=e.first_k_dense, n_group=e.n_group, topk_group=e.topk_group,
            q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank, qk_rope_head_dim=a.qk_rope_head_dim,
            qk_nope_head_dim=a.qk_nope_head_dim, v_head_dim=a.v_head_dim, **common)
    raise AssertionError(m.family)


def hf_count(m):
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config(m))
    return sum(p.numel() for p in model.parameters())  # parameters() counts tied weights once


def active_count(m, total):
    # transformers has no "active" count: subtract the routed experts a token does not use.
    if m.moe is None:
        return total
    per_expert = 3 * m.hidden_size * m.moe.expert_ffn_hidden_size
    return total - (m.num_layers - m.moe.first_k_dense) * (m.moe.num_experts - m.moe.top_k) * per_expert


CASES = {
    "tiny": [], "qwen3-0.6b": [], "qwen3-4b": [], "qwen3-8b": [], "glm4-9b": [], "llama3.1-8b": [],
    "qwen3-30b-a3b": ["model.num_layers=2"], "qwen3-235b-a22b": ["model.num_layers=2"],
    "deepseek-v3": ["model.num_layers=5"], "qwen2.5-7b": [], "mistral-7b": [], "phi-3-mini": [],
}


@pytest.mark.parametrize("model", sorted(CASES))
def test_param_count_equals_transformers(model):
    m = load([f"model={model}", "hardware=h200", *CASES[model]]).model
    ours, theirs = count_params(m), hf_count(m)
    assert ours.total == theirs
    assert ours.active == active_count(m, theirs)


def test_known_totals():
    # Published sizes: Qwen3-4B 4.02B, Qwen3-30B-A3B 30.5B total / 3.3B active, DeepSeek-V3 671B / 37B.
    counts = {m: count_params(load([f"model={m}", "hardware=h200"]).model)
              for m in ("qwen3-4b", "qwen3-30b-a3b", "deepseek-v3")}
    assert round(counts["qwen3-4b"].total / 1e9, 2) == 4.02
    assert (round(counts["qwen3-30b-a3b"].total / 1e9, 1), round(counts["qwen3-30b-a3b"].active / 1e9, 1)) == (30.5, 3.4)
    assert (round(counts["deepseek-v3"].total / 1e9), round(counts["deepseek-v3"].active / 1e9)) == (671, 38)
