"""LoRA in the torch backend (model.lora.rank > 0) through peft: the base weights frozen, the low-rank adapters
(A, B of each targeted linear layer) and the modules in model.lora.modules_to_save trained; only they enter AdamW
and the checkpoints. The engines receive
the merged weights (W + B A * alpha / rank, under the base model's HF names) at every sync, so any engine
that takes full weights serves a LoRA run and the checksum verification is unchanged (docs/algorithms.md "LoRA").
"""
from __future__ import annotations

from pathlib import Path

import torch

ADAPTER = "default"  # peft's adapter name


def wrap(model, lora):
    """model (a transformers causal LM) -> a peft model with one LoRA adapter per model.lora; B starts at 0,
    so the wrapped model computes what the base model computes."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), bias="none",
                        modules_to_save=list(lora.modules_to_save) or None,
                        # a saved embedding of a tied model stays the output layer too (peft wraps lm_head alike)
                        ensure_weight_tying=bool(model.config.tie_word_embeddings) and any(
                            t.endswith(("embed_tokens", "lm_head")) for t in lora.modules_to_save))
    return get_peft_model(model, config)


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


def hf_name(name: str) -> str:
    """A peft model's parameter name -> the base model's HF name (a module in modules_to_save: its trained copy's)."""
    return (name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            .replace(f".modules_to_save.{ADAPTER}.", "."))


@torch.no_grad()
def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The base model's weights with each adapter merged in, by HF name, on the CPU (copies)."""
    from peft.tuners.lora import LoraLayer

    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        if "lora_" in name or ".original_module." in name:  # the adapter (merged below); a saved module's frozen copy
            continue
        out[hf_name(name)] = t.detach().to("cpu", copy=True)
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
            key = hf_name(name) + ".weight"
            out[key] = out[key] + module.get_delta_weight(ADAPTER).detach().to("cpu", out[key].dtype)
    return out


def save_adapter(model, out: Path) -> None:
    """The adapter only (peft's adapter_model.safetensors + adapter_config.json)."""
    model.save_pretrained(out)


def load_adapter(model, src: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = Path(src) / "adapter_model.safetensors"
    if not f.is_file():
        raise RuntimeError(f"{src}: no adapter_model.safetensors: this checkpoint was saved without LoRA; resume it "
                           "with model.lora.rank=0, or start the LoRA run fresh")
    result = set_peft_model_state_dict(model, load_file(str(f)))
    if getattr(result, "unexpected_keys", None):
        raise RuntimeError(f"{src}: the adapter does not match model.lora (unexpected {result.unexpected_keys[:4]})")
