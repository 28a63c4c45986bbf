"""A tiny random-init Qwen3 causal LM + word-level tokenizer, built offline, for engine tests and
benchmarks (no downloads). The real architecture class (Qwen3ForCausalLM) with toy sizes.
"""
from __future__ import annotations

from pathlib import Path

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "and", "answer", "yes", "no",
         "+", "=", "?", "STOP"] + [str(i) for i in range(20)]
SPECIALS = ["<pad>", "<eos>", "<unk>"]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def build_model(seed: int = 0, vocab_size: int | None = None):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab_size = vocab_size or len(SPECIALS) + len(WORDS)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # larger logits than the default init: sampling is not near-uniform
        model.model.embed_tokens.weight.normal_(0.0, 0.1)
    return model.float().eval()


def build_moe_model(seed: int = 0, vocab_size: int | None = None, *, num_experts: int = 8, top_k: int = 2,
                    near_tie: float | None = None):
    """A tiny random-init Qwen3-MoE (Qwen3MoeForCausalLM): 2 layers, every one MoE.

    near_tie: every router row is one shared row plus `near_tie` times its own (random, unit-scale)
    row, so the experts' router logits differ by about near_tie relative to their common part. At
    near_tie ~1e-6 the top-k choice is decided by float32 rounding (2^-24 ~ 6e-8 relative per
    operation, accumulated over the hidden size): two computations of the same token that round
    differently (a KV-cached decode step and a packed training forward) pick different experts, as
    bf16 does at real scale. Routing replay tests use it to make the unreplayed mismatch visible on
    the CPU."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    vocab_size = vocab_size or len(SPECIALS) + len(WORDS)
    config = Qwen3MoeConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
                            num_experts=num_experts, num_experts_per_tok=top_k, norm_topk_prob=True,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                            max_position_embeddings=2048, tie_word_embeddings=True,
                            pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.1)
    return distinct_experts(model, seed, near_tie).float().eval()


def distinct_experts(model, seed: int = 0, near_tie: float | None = None):
    """A transformers Qwen3-MoE's experts and routers re-drawn under `seed` (in place): experts at a
    scale where choosing another one changes the output, routers as build_moe_model's `near_tie`
    says (None: independent rows)."""
    import torch

    from rlrun.rollout.routing import moe_routers

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for router in moe_routers(model).values():
            gate = router.weight
            if near_tie is None:
                gate.copy_(0.5 * torch.randn(gate.shape, generator=g))
            else:
                common = torch.randn(1, gate.shape[1], generator=g)
                gate.copy_(common + near_tie * torch.randn(gate.shape, generator=g))
        for name, p in model.named_parameters():
            if ".mlp.experts." in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def save_tiny_model(path: str | Path, seed: int = 0, model=None) -> Path:
    """The tiny model (build_model(seed), or `model`) and the tokenizer, as an HF model dir."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (model if model is not None else build_model(seed)).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path
