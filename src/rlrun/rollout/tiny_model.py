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


def save_tiny_model(path: str | Path, seed: int = 0) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    build_model(seed).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path
