"""DeepSeek-V3 (multi-latent attention, sigmoid router with expert bias and group-limited routing, shared experts,
YaRN rope) on the megatron backend vs transformers' DeepseekV3ForCausalLM, on one GPU: conf/model/deepseek-v3.yaml
shrunk (the family's structure kept: 1 dense layer then MoE, q LoRA, top_k = 2 x topk_group as DeepSeek-V3's 8 / 4).

Tolerances: fp32 logits 1e-5 relative L2 (same math, other kernels; the CPU test measures 6e-8 absolute); bf16 2e-2
(bf16 activations through 3 layers; a wrong mapping, rope or routing gives O(1): the CPU test's scaling factor left at
1 gives 3% of the logits' size); per-token log-probs in bf16 within 0.05 nats mean absolute (rounding of bf16
logits of magnitude ~1 over a 512-token vocabulary). Packed THD (varlen flash attention; megatron-core 0.19 pads v
to the q/k width for it) vs each sequence alone: 2e-2."""
import pytest
import torch
import yaml

import parity as P

SMALL = dict(num_layers=3, hidden_size=256, ffn_hidden_size=512, num_attention_heads=8, num_query_groups=8, head_dim=32,
             vocab_size=512, max_position_embeddings=16384)
SMALL_MOE = dict(num_experts=8, top_k=4, expert_ffn_hidden_size=128, shared_expert_ffn_hidden_size=128, first_k_dense=1,
                 n_group=4, topk_group=2)
SMALL_MLA = dict(q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)


def _model():
    from types import SimpleNamespace as NS
    d = yaml.safe_load((P.CONF / "model" / "deepseek-v3.yaml").read_text())
    m = dict(d["model"]) | SMALL
    m["moe"], m["mla"] = NS(**(m["moe"] | SMALL_MOE)), NS(**(m["mla"] | SMALL_MLA))
    return NS(**m), dict(d["train"]["megatron"])


@pytest.fixture(scope="module", autouse=True)
def dist():
    P.init_dist("nccl")
    yield


@pytest.fixture
def fresh_parallel_state():
    yield
    from megatron.core import parallel_state
    parallel_state.destroy_model_parallel()


def _pair(dtype):
    model, core = _model()
    hf = P.hf_causal_lm(model, dtype)
    hf.config.routed_scaling_factor = core["moe_router_topk_scaling_factor"]
    with torch.no_grad():  # random init leaves the score-correction bias at 0; a checkpoint's moves the routing
        for layer in hf.model.layers[model.moe.first_k_dense:]:
            layer.mlp.gate.e_score_correction_bias.uniform_(-0.5, 0.5)
    hf = hf.cuda().eval()
    return model, hf, P.megatron_from_hf(model, hf, P.parallelism(), dtype, core=core)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_mla_logits_match_transformers(dtype, tol, fresh_parallel_state):
    torch.manual_seed(1)
    model, hf, gpt = _pair(dtype)
    ids = torch.randint(0, model.vocab_size, (2, 256), device="cuda")
    pos = torch.arange(256, device="cuda")[None].expand(2, -1)
    with torch.no_grad():
        ours, theirs = gpt(ids, pos, attention_mask=None), hf(ids).logits
    err = P.rel_err(ours, theirs)
    print(f"PARITY deepseek_v3 {dtype} dense rel_err={err:.3e} tol={tol}")
    assert err < tol
    if dtype == torch.bfloat16:
        lp = [torch.log_softmax(x.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]) for x in (ours, theirs)]
        gap = float((lp[0] - lp[1]).abs().mean())
        print(f"PARITY deepseek_v3 bf16 logprob mean_abs={gap:.3e}")
        assert gap < 0.05


def test_mla_packed_thd_matches_per_sequence(fresh_parallel_state):
    torch.manual_seed(2)
    model, hf, gpt = _pair(torch.bfloat16)
    err = P.packed_rel_err(gpt, hf, model.vocab_size)
    print(f"PARITY deepseek_v3 bf16 packed rel_err={err:.3e}")
    assert err < 2e-2


def test_mla_round_trip_is_bit_exact_and_backward_reaches_every_weight(fresh_parallel_state):
    from rlrun.train.hf_model import checkpoint_names
    from rlrun.train.megatron.weights import export_hf
    model, hf, gpt = _pair(torch.bfloat16)
    sd = checkpoint_names(hf.state_dict())
    got = {k: v for bucket in export_hf(gpt, model, bucket_bytes=1 << 20, dtype=torch.bfloat16) for k, v in bucket}
    assert set(got) == set(sd)
    bias = [k for k in sd if k.endswith("e_score_correction_bias")]
    assert bias and all(got[k].dtype == torch.float32 for k in bias)  # the router's bias is not rounded to bf16
    bad = [k for k in sd if not torch.equal(got[k].to(sd[k].dtype), sd[k])]
    assert not bad, bad
    ids = torch.randint(0, model.vocab_size, (1, 128), device="cuda")
    gpt.train()
    gpt(ids, torch.arange(128, device="cuda")[None], attention_mask=None).float().square().mean().backward()
    assert all(p.grad is not None for p in gpt.parameters())
