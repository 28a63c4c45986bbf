"""LoRA in the megatron backend (rlrun.train.megatron.lora): the pure parts, without megatron-core: which HF modules
of a fused Megatron layer are targeted, the row layout their adapters write into, the merge math by hand, that a
fused layer's merged adapters equal separate adapters on the HF modules, peft's names, modules_to_save matching,
and the rules validate applies. The modules on megatron-core (the adapters' forward under TP, the backend) are
checked against peft by tests/gpu/test_gpu_megatron_lora.py and tools/device/cpu_lora_harness.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlrun.config import ConfigError, load
from rlrun.train.megatron import lora
from rlrun.train.megatron.weights import interleave_qkv, split_qkv

# tiny Qwen3 shapes (conf/model/tiny.yaml): 4 query heads of 16 in 2 groups, hidden 64, ffn 128
TINY = SimpleNamespace(family="qwen3", num_query_groups=2, num_attention_heads=4, head_dim=16, hidden_size=64,
                       ffn_hidden_size=128, tie_word_embeddings=True, moe=None)


def test_targets_are_the_fused_layers_modules_in_row_order():
    assert lora.targets("self_attention.linear_qkv", ["v_proj", "down_proj", "q_proj"]) == ("q_proj", "v_proj")
    assert lora.targets("mlp.linear_fc1", ["up_proj"]) == ("up_proj",)
    assert lora.targets("mlp.linear_fc1", ["q_proj", "o_proj"]) == ()
    assert lora.targets("mlp.linear_fc2", ["down_proj"]) == ("down_proj",)


def test_row_layout_per_tp_rank():
    # per query group: 2 q heads x 16, one k head, one v head; TP=2 gives each rank one group
    assert lora.row_layout(TINY, "self_attention.linear_qkv", 1) == (2, [32, 16, 16])
    assert lora.row_layout(TINY, "self_attention.linear_qkv", 2) == (1, [32, 16, 16])
    assert lora.row_layout(TINY, "mlp.linear_fc1", 2) == (1, [64, 64])  # [gate half | up half] of the rank
    with pytest.raises(ValueError, match="num_query_groups=2 divisible by parallelism.tp=4"):
        lora.row_layout(TINY, "self_attention.linear_qkv", 4)
    assert lora.in_features(TINY, "self_attention.linear_proj") == 64
    assert lora.in_features(TINY, "mlp.linear_fc2") == 128


def test_fuse_puts_each_modules_rows_in_its_groups_and_zeros_elsewhere():
    q = torch.tensor([[1.], [2.], [3.], [4.]])   # 2 groups x 2 rows
    v = torch.tensor([[9.], [10.]])              # 2 groups x 1 row; k untargeted
    got = lora.fuse([q, None, v], per=[2, 1, 1], groups=2, dim=0)
    assert got.flatten().tolist() == [1, 2, 0, 9, 3, 4, 0, 10]
    # the same along the last dim (activations [tokens, rows])
    acts = lora.fuse([q.t(), None, v.t()], per=[2, 1, 1], groups=2, dim=-1)
    assert acts.flatten().tolist() == [1, 2, 0, 9, 3, 4, 0, 10]
    # with every module present it is megatron's linear_qkv layout (rlrun.train.megatron.weights.interleave_qkv)
    k = torch.tensor([[5.], [6.]])
    assert torch.equal(lora.fuse([q, k, v], [2, 1, 1], 2, 0), interleave_qkv(q, k, v, groups=2))


def test_delta_by_hand():
    a = torch.tensor([[3., 4.]])        # rank 1, in 2
    b = torch.tensor([[1.], [2.]])      # out 2
    assert lora.delta(a, b, scale=0.5).tolist() == [[1.5, 2.0], [3.0, 4.0]]


def test_merged_fused_weight_equals_separate_adapters_on_the_targeted_hf_modules():
    """q_proj + v_proj targeted: merging into linear_qkv and splitting back gives Wq + dq, Wk unchanged, Wv + dv."""
    g = torch.Generator().manual_seed(0)
    m = TINY
    wq, wk, wv = (torch.randn(n, m.hidden_size, generator=g) for n in (64, 32, 32))  # 4 q heads, 2 kv heads of 16
    aq, av = (torch.randn(4, m.hidden_size, generator=g) for _ in range(2))
    bq, bv = torch.randn(64, 4, generator=g), torch.randn(32, 4, generator=g)
    groups, per = lora.row_layout(m, "self_attention.linear_qkv", 1)
    fused = interleave_qkv(wq, wk, wv, groups=2) + lora.fuse([lora.delta(aq, bq, 2.0), None, lora.delta(av, bv, 2.0)],
                                                             per, groups, 0)
    q, k, v = split_qkv(fused, groups=2, heads=4, head_dim=16)
    assert torch.allclose(q, wq + 2.0 * bq @ aq, atol=1e-5) and torch.equal(k, wk)
    assert torch.allclose(v, wv + 2.0 * bv @ av, atol=1e-5)


def test_adapter_splits_over_tp_the_way_the_layer_does():
    """Column layers: each slice's B splits by the rank's groups; the local fused delta of rank r is rank r's rows
    of the full fused delta (what tp_shard gives linear_qkv's weight), so the TP gather of merged weights is exact."""
    g = torch.Generator().manual_seed(1)
    a = {s: torch.randn(4, 64, generator=g) for s in ("q_proj", "k_proj", "v_proj")}
    b = {s: torch.randn(n, 4, generator=g) for s, n in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32))}
    groups, per = lora.row_layout(TINY, "self_attention.linear_qkv", 1)
    full = lora.fuse([lora.delta(a[s], b[s], 1.0) for s in a], per, groups, 0)
    groups, per = lora.row_layout(TINY, "self_attention.linear_qkv", 2)
    local = [lora.fuse([lora.delta(a[s], b[s].chunk(2)[r], 1.0) for s in a], per, groups, 0) for r in range(2)]
    assert torch.allclose(torch.cat(local), full, atol=1e-6)


def test_peft_names_and_modules_to_save():
    assert lora.peft_key(3, "q_proj", "A") == "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"
    assert lora.peft_key(0, "down_proj", "B") == "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"
    assert lora.saved_modules(TINY, "embedding.word_embeddings.weight") == ["model.embed_tokens", "lm_head"]  # tied
    assert lora.saved_modules(TINY, "decoder.layers.1.self_attention.q_layernorm.weight", layer_offset=2) == \
        ["model.layers.3.self_attn.q_norm"]
    lo = SimpleNamespace(modules_to_save=["model.norm", "input_layernorm"])
    assert lora.is_saved(TINY, lo, "decoder.final_layernorm.weight")
    assert lora.is_saved(TINY, lo, "decoder.layers.0.input_layernorm.weight")
    assert not lora.is_saved(TINY, lo, "decoder.layers.0.pre_mlp_layernorm.weight")
    assert not lora.is_saved(TINY, lo, "embedding.word_embeddings.weight")
    assert lora.is_saved(TINY, SimpleNamespace(modules_to_save=["lm_head"]), "embedding.word_embeddings.weight")


def test_init_a_is_pefts_kaiming_bound_and_the_same_on_every_layout():
    a = lora.init_a(seed=1, layer=3, module="q_proj", rank=8, fan_in=64)
    assert a.shape == (8, 64) and float(a.abs().max()) <= 1 / 8 and float(a.abs().max()) > 0.9 / 8
    assert torch.equal(a, lora.init_a(1, 3, "q_proj", 8, 64))
    assert not torch.equal(a, lora.init_a(1, 3, "k_proj", 8, 64))
    assert not torch.equal(a, lora.init_a(1, 2, "q_proj", 8, 64))


MEGATRON = ["model=qwen3-0.6b", "hardware=h100", "train.backend=megatron", "model.lora.rank=8"]


def test_megatron_lora_validates():
    assert load(MEGATRON).model.lora.rank == 8
    assert load(["experiment=copy-grpo-lora-h100"]).model.lora.rank > 0


@pytest.mark.parametrize("overrides,key", [
    (["parallelism.pp=2", "train.gpus_per_node=2"], "parallelism.pp"),
    (["train.cuda_graphs=true"], "train.cuda_graphs"),
    # 8 query groups do not split over TP=16 (o_proj and the MLP alone would)
    (["parallelism.tp=16", "train.gpus_per_node=16", "train.num_nodes=1"], "parallelism.tp"),
])
def test_megatron_lora_refusals(overrides, key):
    with pytest.raises(ConfigError) as e:
        load(MEGATRON + overrides)
    assert key in [p.path for p in e.value.problems]


def test_memory_estimate_counts_the_adapter_only_on_megatron():
    """Megatron's shares (rlrun.config.memory): fp32 grad buffers (train.fp32_grads) and the fp32 master + Adam
    moments sharded over DP, of the adapter's parameters only: 4 B and 12 B / DP per adapter parameter."""
    from rlrun.config.memory import estimate
    from rlrun.config.params import lora_params
    cfg = load(MEGATRON)  # qwen3-0.6b on 8 H100s, TP 1: DP 8
    a, gib = lora_params(cfg.model), 2 ** 30
    assert a == 28 * 8 * (1024 + 2048 + 1024 + 1024 + 1024 + 1024 + 2048 + 1024 + 3 * (1024 + 3072))
    est = estimate(cfg)
    assert cfg.train.fp32_grads and cfg.train.num_gpus == 8
    assert est.trainer_grads * gib == pytest.approx(4 * a) and est.trainer_optimizer * gib == pytest.approx(12 * a / 8)
