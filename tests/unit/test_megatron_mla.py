"""DeepSeek-V3 (multi-latent attention + sigmoid-routed MoE with shared experts) on the megatron backend, on the CPU
with a real megatron-core (0.16.1 where MEGATRON_CORE_PATH names it; skipped without one): a tiny random-init
transformers DeepseekV3ForCausalLM loaded into rlrun's GPTModel (rlrun.train.megatron.weights.load_hf), its logits
against transformers', and every tensor exported back (export_hf) bit-exactly, on one rank and at TP=2 with sequence
parallelism (two gloo processes). megatron-core 0.19.2 (the GPU image's) and bf16 log-probs, packed THD and the
backward are tests/gpu/test_gpu_megatron_mla.py's."""
import os
import sys
from types import SimpleNamespace as NS

import pytest
import torch

from config_problems import config_problems

from rlrun.train.megatron.weights import hf_names, to_hf, to_megatron, tp_shard, tp_unshard

MOE = NS(num_experts=8, top_k=4, expert_ffn_hidden_size=16, shared_expert_ffn_hidden_size=32, first_k_dense=1,
         router="sigmoid", n_group=4, topk_group=2)
MLA = NS(q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)
SCALING = 2.5  # HF routed_scaling_factor = train.megatron.moe_router_topk_scaling_factor


def tiny(**over):
    d = dict(family="deepseek_v3", num_layers=3, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
             num_query_groups=4, head_dim=10, vocab_size=64, rotary_base=10000.0, rotary_percent=1.0,
             rope_scaling_factor=4.0, max_position_embeddings=256, norm_epsilon=1e-6, tie_word_embeddings=False,
             qk_layernorm=True, add_qkv_bias=False, swiglu=True, post_norms=False, moe=MOE, mla=MLA)
    return NS(**(d | over))


def test_mla_names_map_one_to_one_and_split_over_tp_like_column_linears():
    m = tiny()
    pre = "decoder.layers.2.self_attention."
    assert hf_names(m, pre + "linear_q_down_proj.weight") == ["model.layers.2.self_attn.q_a_proj.weight"]
    assert hf_names(m, pre + "q_layernorm.weight") == ["model.layers.2.self_attn.q_a_layernorm.weight"]
    assert hf_names(m, pre + "linear_kv_down_proj.weight", layer_offset=3) == [
        "model.layers.5.self_attn.kv_a_proj_with_mqa.weight"]
    assert hf_names(m, pre + "kv_layernorm.weight") == ["model.layers.2.self_attn.kv_a_layernorm.weight"]
    assert hf_names(m, pre + "linear_kv_up_proj.weight") == ["model.layers.2.self_attn.kv_b_proj.weight"]
    assert hf_names(m, pre + "linear_q_proj.weight") == ["model.layers.2.self_attn.q_proj.weight"]
    # the same Megatron name is Qwen3's q_norm without MLA
    assert hf_names(tiny(mla=None, family="qwen3"), pre + "q_layernorm.weight") == [
        "model.layers.2.self_attn.q_norm.weight"]
    assert hf_names(m, "decoder.layers.1.mlp.router.expert_bias") == ["model.layers.1.mlp.gate.e_score_correction_bias"]
    assert hf_names(m, "decoder.layers.1.mlp.shared_experts.linear_fc1.weight") == [
        "model.layers.1.mlp.shared_experts.gate_proj.weight", "model.layers.1.mlp.shared_experts.up_proj.weight"]
    # kv_b_proj: rows per head; TP 2 gives heads 0-1 and 2-3 (4 heads x (12 + 10) rows)
    up = torch.arange(88.)[:, None]
    assert tp_shard(pre + "linear_kv_up_proj.weight", up, 1, 2).flatten().tolist() == list(range(44, 88))
    # shared experts' [gate; up] splits each half, as the dense linear_fc1
    fc1 = torch.arange(8.)[:, None]
    name = "decoder.layers.1.mlp.shared_experts.linear_fc1.weight"
    shards = [tp_shard(name, fc1, r, 2) for r in range(2)]
    assert [s.flatten().tolist() for s in shards] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert torch.equal(tp_unshard(name, shards), fc1)
    assert tp_shard("decoder.layers.1.mlp.router.expert_bias", torch.ones(8), 1, 2).shape == (8,)  # replicated
    gate, upw = torch.zeros(4, 2), torch.ones(4, 2)
    full = to_megatron(m, name, [gate, upw])
    assert [n for n, _ in to_hf(m, name, full)] == hf_names(m, name)


@pytest.fixture
def megatron_cpu(monkeypatch):
    """megatron-core on the CPU: a one-rank gloo group. MLA's rope and the router's expert-bias buffers ask
    torch.cuda.current_device() for their device whatever use_cpu_initialization says; the double answers "cpu"
    (the GPU test builds them on the device)."""
    extra = os.environ.get("MEGATRON_CORE_PATH")
    if extra:
        sys.path.insert(0, extra)
    try:
        pytest.importorskip("megatron.core")
        from megatron.core import parallel_state, utils
        from packaging.version import Version
        if utils.get_te_version() is None:
            utils._te_version = Version("0.0.0")
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
        from megatron.core.transformer.moe import moe_utils
        if not hasattr(moe_utils, "te_general_gemm"):  # 0.16.1 leaves it undefined without TE (0.19.2 sets None)
            monkeypatch.setattr(moe_utils, "te_general_gemm", None, raising=False)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29617")
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        yield
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()
    finally:
        if extra:
            sys.path.remove(extra)


def _hf(model):
    from transformers import AutoModelForCausalLM

    from rlrun.train.hf_model import checkpoint_names, hf_config
    cfg = hf_config(model)
    cfg.routed_scaling_factor = SCALING
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():  # random-init leaves the bias at 0; a real checkpoint's moves the routing
        for layer in hf.model.layers[model.moe.first_k_dense:]:
            layer.mlp.gate.e_score_correction_bias.uniform_(-0.5, 0.5)
            layer.mlp.gate.weight.normal_(0, 0.5)
    return hf, checkpoint_names(hf.state_dict())


def _megatron(model):
    from rlrun.train.megatron import model as mm
    from rlrun.train.megatron.weights import hf_tensor_count, load_hf
    par = NS(tp=1, pp=1, cp=1, ep=1, sequence_parallel=False)
    mm.init_parallel(par, seed=0, moe=True)
    cfg = mm.transformer_config(model, par, dtype=torch.float32, cpu_init=True)
    # what train.megatron carries for DeepSeek-V3 (conf/model/deepseek-v3.yaml; slime's --mscale-all-dim,
    # --moe-router-topk-scaling-factor); the all-gather dispatcher: the all-to-all one makes a CUDA stream
    cfg.mscale_all_dim, cfg.moe_router_topk_scaling_factor, cfg.moe_token_dispatcher_type = 1.0, SCALING, "allgather"
    gpt = mm.build_gpt(model, cfg)
    return gpt, load_hf, hf_tensor_count


# DeepSeek-V3/R1 and Kimi-K2: q LoRA, group-limited routing, YaRN; Moonlight: q_proj without LoRA (and so no q norm),
# one group, plain rope
SHAPES = {"deepseek": {}, "moonlight": dict(mla=NS(**(vars(MLA) | {"q_lora_rank": None})), rope_scaling_factor=1.0,
                                           moe=NS(**(vars(MOE) | {"n_group": 1, "topk_group": 1})))}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_deepseek_v3_loads_matches_transformers_and_exports_bit_exactly(megatron_cpu, shape):
    from rlrun.train.megatron.weights import export_hf
    model = tiny(**SHAPES[shape])
    hf, sd = _hf(model)
    gpt, load_hf, count = _megatron(model)
    n = load_hf(gpt, model, lambda k: sd[k])
    assert n == count(gpt)  # every Megatron tensor (with the routers' expert_bias buffers) filled from HF
    exported = dict(kv for bucket in export_hf(gpt, model, bucket_bytes=4096) for kv in bucket)
    assert exported.keys() == sd.keys()
    for k, t in sd.items():
        assert torch.equal(exported[k], t), k

    torch.manual_seed(1)
    tokens = torch.randint(0, model.vocab_size, (2, 24))
    pos = torch.arange(24)[None].expand(2, -1)
    gpt.eval()
    with torch.no_grad():
        ours = gpt(input_ids=tokens, position_ids=pos, attention_mask=None)  # [b, s, vocab]
        theirs = hf(input_ids=tokens).logits
    # fp32 on both sides: only the order of the sums differs (MLA's up projections, the experts' weighted sum).
    # |logits| ~ 1 after 3 layers; fp32's 6e-8 relative rounding over ~10^2 sums per value stays below 1e-5.
    assert ours.shape == theirs.shape
    assert float((ours - theirs).abs().max()) < 1e-5, float((ours - theirs).abs().max())


def _tp2_rank(rank: int, port: int, out) -> None:
    """One of two gloo ranks at TP=2 with sequence parallelism (megatron-core runs MoE with TP > 1 only under SP):
    the column-split down projections, the per-head up projections, the row-split o_proj and shared experts."""
    import contextlib

    torch.cuda.current_device = lambda: "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    from megatron.core import utils
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region
    from megatron.core.tensor_parallel import random as mrandom
    from megatron.core.transformer.moe import moe_utils
    from packaging.version import Version
    if utils.get_te_version() is None:
        utils._te_version = Version("0.0.0")
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    # the embedding forks the CUDA RNG tracker for its dropout (0 here): nothing to fork on the CPU
    mrandom.CudaRNGStatesTracker.fork = contextlib.contextmanager(lambda self, name=None: (yield))
    from rlrun.train.megatron import model as mm
    from rlrun.train.megatron.weights import export_hf, load_hf

    model = tiny()
    hf, sd = _hf(model)
    par = NS(tp=2, pp=1, cp=1, ep=1, sequence_parallel=True)
    mm.init_parallel(par, seed=0, moe=True)
    cfg = mm.transformer_config(model, par, dtype=torch.float32, cpu_init=True)
    cfg.mscale_all_dim, cfg.moe_router_topk_scaling_factor, cfg.moe_token_dispatcher_type = 1.0, SCALING, "allgather"
    gpt = mm.build_gpt(model, cfg)
    load_hf(gpt, model, lambda k: sd[k])
    shard = gpt.decoder.layers[2].self_attention.linear_kv_up_proj.weight.shape  # 2 of the 4 heads' (12 + 10) rows
    got = {k: v for b in export_hf(gpt, model, bucket_bytes=4096) for k, v in b}
    exact = set(got) == set(sd) and all(torch.equal(got[k], sd[k]) for k in sd)
    torch.manual_seed(1)
    tokens = torch.randint(0, model.vocab_size, (2, 24))
    gpt.eval()
    with torch.no_grad():
        ours = gather_from_tensor_model_parallel_region(
            gpt(input_ids=tokens, position_ids=torch.arange(24)[None].expand(2, -1), attention_mask=None))
        theirs = hf(input_ids=tokens).logits
    out.put((rank, tuple(shard), exact, float((ours - theirs).abs().max())))
    torch.distributed.destroy_process_group()


def test_tp2_with_sequence_parallelism_shards_mla_and_matches(megatron_cpu):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(_tp2_rank, args=(29671, out), nprocs=2)
    results = sorted(out.get(timeout=60) for _ in range(2))
    for rank, shard, exact, err in results:
        assert shard == (44, 16) and exact, (rank, shard, exact)
        assert err < 1e-5, (rank, err)  # as the one-rank test: fp32, only the order of sums differs


DSV3 = ["model=deepseek-v3", "hardware=h100", "train.backend=megatron", "checks.memory_fit=warn",
        "train.num_nodes=4", "cluster.num_nodes=4"]


_problems = config_problems


def test_deepseek_v3_validates_for_the_megatron_backend_and_refuses_what_it_computes_otherwise(tmp_path):
    assert "model.family" not in _problems(DSV3)  # trained by the megatron backend now
    # megatron-core ranks groups by their top-(top_k / topk_group) scores, HF DeepSeek-V3 by the top 2
    bad = _problems([*DSV3, "model.moe.top_k=4"])
    assert "model.moe.topk_group" in bad and "top 1 scores" in bad["model.moe.topk_group"].message
    assert "train.megatron.moe_router_enable_expert_bias" in _problems(
        [*DSV3, "+train.megatron.moe_router_enable_expert_bias=false"])
    # the MLA shape is model.mla's, not a second copy in train.megatron
    assert "train.megatron.kv_lora_rank" in _problems([*DSV3, "+train.megatron.kv_lora_rank=256"])
    # a checkpoint's config.json: routed_scaling_factor and YaRN's mscale must be what megatron-core uses
    import json
    from transformers import DeepseekV3Config
    hf = DeepseekV3Config(routed_scaling_factor=2.827, rope_scaling={
        "type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
        "beta_fast": 32, "beta_slow": 1}).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(hf))
    got = _problems([*DSV3, f"checkpoint.hf={tmp_path}"])
    assert got["train.megatron.moe_router_topk_scaling_factor"].fix == "set train.megatron.moe_router_topk_scaling_factor=2.827"
    assert got["train.megatron.mscale_all_dim"].fix == "set train.megatron.mscale_all_dim=0.707"
    assert "train.megatron.mscale" not in got


def test_the_deepseek_v3_profile_builds_megatron_cores_mla_config(megatron_cpu):
    """conf/model/deepseek-v3.yaml as the backend turns it into megatron-core's config (with train.*, so train.megatron's
    fields pass through): every MLA, YaRN and router value of DeepSeek-V3's config.json arrives."""
    from rlrun.config import load
    from rlrun.train.megatron import model as mm
    cfg = load(DSV3)
    tc = mm.transformer_config(cfg.model, cfg.parallelism, cfg.train, cpu_init=True)
    assert type(tc).__name__ == "MLATransformerConfig"
    assert (tc.q_lora_rank, tc.kv_lora_rank, tc.qk_head_dim, tc.qk_pos_emb_head_dim, tc.v_head_dim) == (1536, 512, 128, 64, 128)
    assert (tc.rope_type, tc.rotary_scaling_factor, tc.rotary_base, tc.mscale, tc.mscale_all_dim,
            tc.original_max_position_embeddings, tc.rotary_interleaved) == ("yarn", 40.0, 10000.0, 1.0, 1.0, 4096, False)
    assert (tc.moe_router_score_function, tc.moe_router_enable_expert_bias, tc.moe_router_bias_update_rate,
            tc.moe_router_num_groups, tc.moe_router_group_topk, tc.moe_router_topk, tc.moe_router_topk_scaling_factor,
            tc.moe_shared_expert_intermediate_size) == ("sigmoid", True, 0.0, 8, 4, 8, 2.5, 2048)
