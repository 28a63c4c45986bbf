"""Megatron (rlrun's local spec + SDPA attention) vs transformers on the same random-init model.

Tolerances (relative L2 error of the logits over the whole batch):
- fp32: 1e-5 (same math, different kernels and fused qkv/fc1 GEMMs);
- bf16: 2e-2 (bf16 rounding of activations through 2 layers; a wrong rope, norm or mapping
  gives O(1));
- HF -> Megatron -> HF is bit-exact (pure reshapes and copies).
"""
import pytest
import torch

import parity as P

ARCHS = sorted(P.ARCHS.items()) + sorted(P.MOE_ARCHS.items())


@pytest.fixture(scope="module", autouse=True)
def dist():
    P.init_dist("nccl")
    yield
    from megatron.core import parallel_state
    parallel_state.destroy_model_parallel()


@pytest.fixture
def fresh_parallel_state():
    yield
    from megatron.core import parallel_state
    parallel_state.destroy_model_parallel()


def _pair(conf, dtype):
    model = P.small_model(conf)
    hf = P.hf_causal_lm(model, dtype).cuda().eval()
    return model, hf, P.megatron_from_hf(model, hf, P.parallelism(), dtype)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("family,conf", ARCHS, ids=[a for a, _ in ARCHS])
def test_logits_match_transformers(family, conf, dtype, tol, fresh_parallel_state):
    torch.manual_seed(1)
    model, hf, gpt = _pair(conf, dtype)
    ids = torch.randint(0, model.vocab_size, (2, 256), device="cuda")
    pos = torch.arange(256, device="cuda")[None].expand(2, -1)
    with torch.no_grad():
        err = P.rel_err(gpt(ids, pos, attention_mask=None), hf(ids).logits)
    print(f"PARITY {family} {dtype} dense rel_err={err:.3e} tol={tol}")
    assert err < tol


@pytest.mark.parametrize("family,conf", ARCHS, ids=[a for a, _ in ARCHS])
def test_packed_thd_matches_per_sequence(family, conf, fresh_parallel_state):
    """Packed variable-length micro-batch (varlen flash attention, bf16) vs each sequence alone."""
    torch.manual_seed(2)
    model, hf, gpt = _pair(conf, torch.bfloat16)
    err = P.packed_rel_err(gpt, hf, model.vocab_size)
    print(f"PARITY {family} bf16 packed rel_err={err:.3e}")
    assert err < 2e-2


@pytest.mark.parametrize("family,conf", ARCHS, ids=[a for a, _ in ARCHS])
def test_hf_megatron_hf_round_trip_is_bit_exact(family, conf, fresh_parallel_state):
    from rlrun.train.megatron.weights import export_hf

    from rlrun.train.hf_model import checkpoint_names
    model, hf, gpt = _pair(conf, torch.bfloat16)
    sd = checkpoint_names(hf.state_dict())
    got = {k: v for bucket in export_hf(gpt, model, bucket_bytes=1 << 20) for k, v in bucket}
    want = set(sd) - ({"lm_head.weight"} if model.tie_word_embeddings else set())
    assert set(got) == want
    assert all(torch.equal(got[k], sd[k]) for k in want)


def test_packed_forward_and_backward_never_sync_with_the_host(fresh_parallel_state):
    """rlrun's rope (rlrun.train.megatron.rope) replaced megatron-core's THD rope, which read
    cu_seqlens back to the host 4 times per layer; CUDA's sync debug mode raises on any sync."""
    torch.manual_seed(3)
    model, hf, gpt = _pair("qwen3-0.6b", torch.bfloat16)
    lens = [300, 17, 129]
    ids = torch.randint(0, model.vocab_size, (1, sum(lens)), device="cuda")
    pos = torch.cat([torch.arange(n, device="cuda") for n in lens])[None]
    psp = P.packed_params(lens, "cuda")
    gpt.train()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = gpt(ids, pos, attention_mask=None, packed_seq_params=psp)
        out.float().square().mean().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(p.grad is not None for p in gpt.parameters())
