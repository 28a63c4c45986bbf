"""HF <-> Megatron layouts and THD packing of the megatron backend: pure tensor functions, so they
run on the CPU without megatron-core (the GPU checks in tests/gpu cover the whole models)."""
from types import SimpleNamespace

import pytest
import torch

from rlrun.train.megatron.packing import pack
from rlrun.train.megatron.weights import hf_names, interleave_qkv, split_qkv, to_hf, to_megatron, tp_shard, \
    tp_unshard

# 4 query heads in 2 groups, head_dim 1, hidden 1: rows are easy to follow by value.
M = SimpleNamespace(family="qwen3", num_query_groups=2, num_attention_heads=4, head_dim=1)
Q, K, V = torch.tensor([[1.], [2.], [3.], [4.]]), torch.tensor([[10.], [20.]]), torch.tensor([[100.], [200.]])


def test_qkv_rows_are_grouped_per_query_group():
    # group 0: q1 q2 k1 v1, group 1: q3 q4 k2 v2 (megatron-core's linear_qkv layout)
    assert interleave_qkv(Q, K, V, groups=2).flatten().tolist() == [1, 2, 10, 100, 3, 4, 20, 200]
    bias = interleave_qkv(Q[:, 0], K[:, 0], V[:, 0], groups=2)
    assert bias.tolist() == [1, 2, 10, 100, 3, 4, 20, 200]


def test_split_qkv_inverts_interleave():
    q, k, v = split_qkv(interleave_qkv(Q, K, V, groups=2), groups=2, heads=4, head_dim=1)
    assert torch.equal(q, Q) and torch.equal(k, K) and torch.equal(v, V)


def test_fc1_tp_shards_split_gate_and_up_separately():
    full = torch.arange(8.)[:, None]  # gate rows 0-3, up rows 4-7
    shards = [tp_shard("decoder.layers.0.mlp.linear_fc1.weight", full, r, 2) for r in range(2)]
    assert [s.flatten().tolist() for s in shards] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert torch.equal(tp_unshard("decoder.layers.0.mlp.linear_fc1.weight", shards), full)


def test_row_parallel_splits_columns_and_norms_stay_whole():
    w = torch.arange(12.).reshape(2, 6)
    shards = [tp_shard("decoder.layers.3.self_attention.linear_proj.weight", w, r, 3) for r in range(3)]
    assert shards[1].tolist() == [[2, 3], [8, 9]]
    assert torch.equal(tp_unshard("decoder.layers.3.self_attention.linear_proj.weight", shards), w)
    norm = torch.ones(6)
    assert tp_shard("decoder.layers.3.input_layernorm.weight", norm, 1, 3) is norm


def test_uneven_split_names_the_parameter():
    with pytest.raises(ValueError, match="embedding.word_embeddings.weight: dim 0 of size 5"):
        tp_shard("embedding.word_embeddings.weight", torch.zeros(5, 2), 0, 2)


def test_names_follow_the_family_and_the_pipeline_offset():
    assert hf_names(M, "decoder.layers.1.mlp.linear_fc1.weight", layer_offset=10) == [
        "model.layers.11.mlp.gate_proj.weight", "model.layers.11.mlp.up_proj.weight"]
    glm = SimpleNamespace(**(vars(M) | {"family": "glm4"}))
    assert hf_names(glm, "decoder.layers.0.mlp.linear_fc1.weight") == ["model.layers.0.mlp.gate_up_proj.weight"]
    assert hf_names(glm, "decoder.layers.0.self_attention.linear_proj.post_norm.weight") == [
        "model.layers.0.post_self_attn_layernorm.weight"]
    with pytest.raises(KeyError, match="decoder.layers.0.mlp.shared_experts.gate_weight"):  # Qwen3-Next's gate: not built
        hf_names(M, "decoder.layers.0.mlp.shared_experts.gate_weight")


def test_moe_names_map_router_and_experts_with_the_ep_offset():
    # Qwen3-MoE: router = mlp.gate; local expert i on an EP rank whose first global expert is 8 -> experts.{8+i}
    assert hf_names(M, "decoder.layers.2.mlp.router.weight") == ["model.layers.2.mlp.gate.weight"]
    assert hf_names(M, "decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.weight", expert_offset=8) == [
        "model.layers.2.mlp.experts.11.gate_proj.weight", "model.layers.2.mlp.experts.11.up_proj.weight"]
    assert hf_names(M, "decoder.layers.2.mlp.experts.local_experts.0.linear_fc2.weight", layer_offset=1) == [
        "model.layers.3.mlp.experts.0.down_proj.weight"]
    gate, up = torch.full((2, 3), 1.0), torch.full((2, 3), 2.0)
    name = "decoder.layers.0.mlp.experts.local_experts.1.linear_fc1.weight"
    full = to_megatron(M, name, [gate, up])
    assert full[:, 0].tolist() == [1, 1, 2, 2]
    assert [(n, t[:, 0].tolist()) for n, t in to_hf(M, name, full, expert_offset=4)] == [
        ("model.layers.0.mlp.experts.5.gate_proj.weight", [1, 1]), ("model.layers.0.mlp.experts.5.up_proj.weight", [2, 2])]
    # experts are whole on every TP rank (expert TP 1)
    assert tp_shard(name, full, 1, 2) is full


def test_to_hf_inverts_to_megatron():
    name = "decoder.layers.0.self_attention.linear_qkv.weight"
    full = to_megatron(M, name, [Q, K, V])
    assert [(n, t.flatten().tolist()) for n, t in to_hf(M, name, full)] == [
        ("model.layers.0.self_attn.q_proj.weight", [1, 2, 3, 4]),
        ("model.layers.0.self_attn.k_proj.weight", [10, 20]),
        ("model.layers.0.self_attn.v_proj.weight", [100, 200])]


def test_pack_rows_predict_the_response_tokens_and_pad_to_tp():
    tokens = [torch.tensor([5, 6, 7, 8]), torch.tensor([1, 2, 3])]
    mb = pack(tokens, response_start=[2, 1], index=[0, 1], pad_to=4, device="cpu")
    assert mb.tokens.tolist() == [[5, 6, 7, 8, 1, 2, 3, 0]]           # 7 tokens padded to 8
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0]]
    assert mb.cu_seqlens.tolist() == [0, 4, 7, 8]                      # the pad is its own sequence
    assert mb.logit_rows.tolist() == [1, 2, 4, 5]                      # row t predicts token t+1
    assert mb.targets.tolist() == [7, 8, 2, 3]
    assert mb.response_cu.tolist() == [0, 2, 4]


def test_backend_imports_without_megatron_and_refuses_cpu_ranks():
    from rlrun.train.megatron_backend import MegatronBackend
    cfg = SimpleNamespace(algo=SimpleNamespace(use_kl_loss=False, kl_coef=0.0))
    with pytest.raises(ValueError, match="train.backend=megatron needs a GPU per trainer rank"):
        MegatronBackend(cfg, rank=0, world_size=1, gpu_id=None, total_steps=1)


def test_fast_ops_match_the_per_tensor_definitions():
    from rlrun.train.megatron.fast_ops import _l2_norm, _scale
    a, b = torch.tensor([3.0, 4.0]), torch.tensor([[12.0]])
    norm, _ = _l2_norm(None, None, [[a, b, torch.empty(0)]], False)
    assert norm.tolist() == [13.0]  # sqrt(9 + 16 + 144)
    dst = [torch.zeros(2), torch.zeros(1, 1)]
    _scale(None, None, [[a, b], dst], 0.5)
    assert dst[0].tolist() == [1.5, 2.0] and dst[1].tolist() == [[6.0]]
    _scale(None, None, [[a, b], [a, b]], 2.0)  # in place, as clipping calls it
    assert a.tolist() == [6.0, 8.0] and b.tolist() == [[24.0]]


def test_checkpoint_names_unfuse_transformers_moe_experts_in_gate_up_order():
    import transformers

    from rlrun.train.hf_model import checkpoint_names
    cfg = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=3,
                                      num_experts_per_tok=1, moe_intermediate_size=8)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    sd = checkpoint_names(model.state_dict())
    pre = "model.layers.0.mlp.experts."
    assert {f"{pre}{e}.{p}_proj.weight" for e in range(3) for p in ("gate", "up", "down")} <= set(sd)
    assert not any(k.endswith(("experts.gate_up_proj", "experts.down_proj")) for k in sd)
    assert sd[f"{pre}2.gate_proj.weight"].shape == (8, 16) and sd[f"{pre}2.down_proj.weight"].shape == (16, 8)
    # transformers' own expert 2 on a few tokens == SwiGLU with the unfused weights (gate first, then up)
    x = torch.randn(4, 16)
    experts = model.model.layers[0].mlp.experts
    with torch.no_grad():
        got = experts(x, torch.full((4, 1), 2), torch.ones(4, 1))
        g, u, d = (sd[f"{pre}2.{p}_proj.weight"] for p in ("gate", "up", "down"))
        want = (torch.nn.functional.silu(x @ g.t()) * (x @ u.t())) @ d.t()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
