"""Helpers shared by the GPU checks: shrunken real architectures from conf/model, the same
random-init HF model built by the torch backend's code, and a Megatron model loaded from it."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch
import yaml

CONF = Path(__file__).resolve().parents[2] / "conf"

# Small shapes that keep every structural feature of the family (GQA ratio, qk-norm, qkv bias,
# post norms, partial interleaved rope, rope scaling, tied/untied embeddings).
SMALL = dict(num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=8, head_dim=32,
             vocab_size=512, max_position_embeddings=16384)
ARCHS = {"qwen3": "qwen3-0.6b", "llama": "llama3.1-8b", "glm4": "glm4-9b", "qwen2": "qwen2.5-7b", "mistral": "mistral-7b"}
# MoE families: single-GPU checks only (megatron-core runs MoE with TP > 1 only under sequence parallelism)
MOE_ARCHS = {"qwen3_moe": "qwen3-30b-a3b"}
SMALL_MOE = dict(num_experts=8, top_k=2, expert_ffn_hidden_size=128)


def small_model(conf_name: str, **over) -> SimpleNamespace:
    """conf/model/<conf_name>.yaml with SMALL shapes; query groups keep the family's GQA ratio."""
    d = yaml.safe_load((CONF / "model" / f"{conf_name}.yaml").read_text())
    d = dict(d.get("model", d))  # group files are @package _global_ with a model: key
    ratio = d["num_attention_heads"] // d["num_query_groups"]
    d.update(SMALL)
    d["num_query_groups"] = max(SMALL["num_attention_heads"] // ratio, 2)
    if d.get("moe"):
        d["moe"] = SimpleNamespace(**(d["moe"] | SMALL_MOE))
    d.update(over)
    return SimpleNamespace(**d)


def parallelism(tp=1, pp=1, cp=1, ep=1, sp=False) -> SimpleNamespace:
    return SimpleNamespace(tp=tp, pp=pp, cp=cp, ep=ep, sequence_parallel=sp)


def init_dist(backend: str) -> None:
    if not torch.distributed.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        torch.distributed.init_process_group(backend, rank=int(os.environ.get("RANK", 0)),
                                             world_size=int(os.environ.get("WORLD_SIZE", 1)))


def hf_causal_lm(model, dtype, seed=0):
    """The torch backend's transformers config of `model`, random init under `seed`."""
    import transformers

    from rlrun.train.hf_model import hf_config
    cfg = hf_config(model)
    cfg.pad_token_id = None  # family defaults (GLM-4: 151329) lie outside the small test vocab
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")


def megatron_from_hf(model, hf, par, dtype, cpu_init=False, core: dict | None = None):
    """Megatron GPTModel with `hf`'s weights, in eval mode. core: megatron-core config fields a train.megatron
    would carry (DeepSeek-V3's routed scaling factor and YaRN mscale: conf/model/deepseek-v3.yaml)."""
    from rlrun.train.megatron import model as mm
    from rlrun.train.megatron.weights import load_hf

    mm.init_parallel(par, seed=0, moe=getattr(model, "moe", None) is not None)
    cfg = mm.transformer_config(model, par, dtype=dtype, cpu_init=cpu_init)
    for k, v in (core or {}).items():
        setattr(cfg, k, v)
    gpt = mm.build_gpt(model, cfg)
    if not cpu_init:
        gpt = gpt.cuda()
    from rlrun.train.hf_model import checkpoint_names
    from rlrun.train.megatron.weights import hf_tensor_count
    sd = checkpoint_names(hf.state_dict())
    n = load_hf(gpt, model, lambda k: sd[k])
    assert n == hf_tensor_count(gpt), "every Megatron parameter (and router expert bias) must come from the HF model"
    return gpt.eval()


def packed_params(lengths, device):
    from megatron.core.packed_seq_params import PackedSeqParams
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=device)
    m = max(lengths)
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=m, max_seqlen_kv=m)


def packed_rel_err(gpt, hf, vocab_size: int, lens=(300, 17, 129, 64)) -> float:
    """Relative L2 error of the megatron model's logits for a packed THD micro-batch of random sequences of `lens`
    tokens (varlen attention, drawn from torch's current RNG) against transformers' logits of each sequence alone."""
    seqs = [torch.randint(0, vocab_size, (n,), device="cuda") for n in lens]
    pos = torch.cat([torch.arange(n, device="cuda") for n in lens])[None]
    with torch.no_grad():
        out = gpt(torch.cat(seqs)[None], pos, attention_mask=None, packed_seq_params=packed_params(list(lens), "cuda"))
        ref = torch.cat([hf(s[None]).logits[0] for s in seqs])
    return rel_err(out[0], ref)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def train_batch(vocab: int, seed: int = 0):
    """A TrainBatch of 7 random samples (12-47 tokens, responses from token 3-9, all loss tokens, one advantage per
    sample), the same for every backend test."""
    from rlrun.train.base import TrainBatch
    g = torch.Generator().manual_seed(seed)
    lens = [int(x) for x in torch.randint(12, 48, (7,), generator=g)]
    starts = [int(x) for x in torch.randint(3, 10, (7,), generator=g)]
    tokens = [torch.randint(0, vocab, (n,), generator=g) for n in lens]
    mask = [torch.ones(n - s) for n, s in zip(lens, starts)]
    adv = [torch.full((n - s,), float(torch.randn(1, generator=g))) for n, s in zip(lens, starts)]
    return TrainBatch(tokens=tokens, response_start=starts, loss_mask=mask, advantages=adv)
