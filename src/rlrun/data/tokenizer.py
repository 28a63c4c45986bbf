"""The tokenizer a run uses, in one place for the runner and the preflight (no torch: transformers'
tokenizers load without it)."""
from __future__ import annotations


def tokenizer_for(cfg):
    """checkpoint.hf's tokenizer, or the toy tokenizer built offline for random-init models."""
    if cfg.checkpoint.hf:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(cfg.checkpoint.hf)
    from rlrun.data.toy import build_toy_tokenizer

    return build_toy_tokenizer()
