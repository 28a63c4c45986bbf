"""Block-wise FP8 (e4m3) weights for FP8 rollout with bf16 training: the quantize step of a weight sync.

The format is that of the FP8 HF checkpoints SGLang serves (Qwen3-*-FP8, DeepSeek-V3: config.json
quantization_config {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
"weight_block_size": [128, 128]}) and that slime's trainer writes on each sync
(slime/backends/megatron_utils/megatron_to_hf/processors/quantizer_fp8.py): a linear layer's 2-D
`<name>.weight` [N, K] becomes float8_e4m3fn, and `<name>.weight_scale_inv` [ceil(N/128), ceil(K/128)]
float32 holds one scale per 128 x 128 block, scale = amax(|block|) / 448 (e4m3's largest finite value),
so that weight ~= fp8 * scale block by block. Embeddings, norms, MoE routers and the output layer stay
in the training dtype (slime's list: attention projections, dense and expert MLPs).

Error: e4m3 keeps 3 mantissa bits, so rounding to nearest moves a normal value by at most half a unit
in the last place, 2^-4 of its magnitude; below e4m3's smallest normal (2^-6, times the block's scale)
values are subnormal, spaced 2^-9 apart, so they move by at most 2^-10 * scale. For every element:
|w - dequantize(quantize(w))| <= max(2^-4 |w|, 2^-10 * scale) (tests/unit/test_fp8.py).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import torch

from rlrun.config.memory import FP8_BLOCK, FP8_QUANT_CONFIG

BLOCK = (FP8_BLOCK, FP8_BLOCK)
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
SCALE_SUFFIX = "_scale_inv"  # "<name>.weight" -> "<name>.weight_scale_inv"

# HF names of the linear weights a sync quantizes (Qwen3 / Llama-style and Qwen3-MoE per-expert names)
_QUANTIZED = re.compile(r"\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$")


def quantize_blockwise(w: torch.Tensor, block: tuple[int, int] = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] weight -> (float8_e4m3fn [N, K], float32 scales [ceil(N/bn), ceil(K/bk)])."""
    if w.dim() != 2:
        raise ValueError(f"block-wise FP8 quantizes 2-D weights, got shape {tuple(w.shape)}")
    bn, bk = block
    n, k = w.shape
    rows, cols = -(-n // bn), -(-k // bk)
    padded = torch.zeros(rows * bn, cols * bk, dtype=torch.float32, device=w.device)
    padded[:n, :k].copy_(w)  # cast while copying: no float32 temporary besides `padded`
    blocks = padded.view(rows, bn, cols, bk)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # an all-zero block: any scale works
    scale = amax / E4M3_MAX
    # in place: one float32 copy of the weight at a time (a sync quantizes on the trainer's GPU, beside its state)
    q = blocks.div_(scale[:, None, :, None]).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(rows * bn, cols * bk)[:n, :k].contiguous(), scale


def dequantize_blockwise(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = BLOCK,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The inverse (up to the rounding): fp8 [N, K] times its block's scale."""
    bn, bk = block
    n, k = q.shape
    full = scale.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    return (q.float() * full).to(dtype)


def quantizes(name: str, t: torch.Tensor) -> bool:
    """Whether a sync sends tensor `name` as block-wise FP8 (a 2-D linear weight of the list above)."""
    return t.dim() == 2 and bool(_QUANTIZED.search(name))


def quantize_named(named, block: tuple[int, int] = BLOCK):
    """(name, tensor) pairs in HF names -> the pairs an FP8 engine loads: each quantized weight followed by
    its `<name>_scale_inv`, everything else unchanged (a generator: one tensor at a time, as a bucket fills)."""
    for name, t in named:
        if quantizes(name, t):
            q, scale = quantize_blockwise(t, block)
            yield name, q
            yield name + SCALE_SUFFIX, scale
        else:
            yield name, t


def quantize_bucket(bucket: list) -> list:
    """One bucket of a sync as the FP8 engine loads it (quantize_named): on the bucket's device (the trainer's GPU),
    so the push sends 1 B/param plus the scales. Never larger than the bucket it came from: an [N, K] weight of 2 B
    becomes N K + 4 ceil(N/128) ceil(K/128) bytes <= 2 N K whenever N K >= 4, so the transport's bucket_bytes
    bound still holds."""
    return list(quantize_named(bucket))


# ---- the engines' initial weights: an FP8 HF dir ---------------------------------------------------------------

WEIGHTS_INDEX = "model.safetensors.index.json"


def is_fp8_dir(path: str | Path) -> bool:
    """Whether `path` (an HF dir) is a block-wise 128 x 128 FP8 checkpoint with dynamic activation scales, the form
    write_fp8_dir writes and SGLang's Fp8Config reads."""
    f = Path(path) / "config.json"
    q = (json.loads(f.read_text()).get("quantization_config") or {}) if f.is_file() else {}
    return q.get("quant_method") == "fp8" and list(q.get("weight_block_size") or ()) == list(BLOCK) \
        and q.get("activation_scheme", "dynamic") == "dynamic"


def _shard(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """A safetensors file's tensors, read one at a time (the file is memory-mapped, nothing else is held)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            yield name, f.get_tensor(name)


def write_fp8_dir(src: str | Path, out: str | Path) -> str:
    """The FP8 HF dir the engines start from with rollout.fp8: `src`'s linear weights quantized block-wise
    (quantize_named: `<name>.weight` float8_e4m3fn + `<name>.weight_scale_inv` float32), every other tensor as it is,
    config.json with FP8_QUANT_CONFIG, the other files (tokenizer, generation config) copied. Streamed shard by
    shard: at most one output shard is in host memory. out == src converts the dir in place (each shard replaced
    once written: the random init the runner has just written). Returns str(out)."""
    src, out = Path(src), Path(out)
    shards = sorted(src.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no *.safetensors in {src}: an FP8 copy needs the bf16 HF weights")
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for shard in shards:
        part = dict(quantize_named(_shard(shard)))
        tmp = out / (shard.name + ".tmp")
        save_file(part, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, out / shard.name)
        weight_map.update({name: shard.name for name in part})
        del part
    for f in src.iterdir():  # tokenizer, generation config, ...; the weights' own files are written here
        if f.is_file() and f.suffix != ".safetensors" and f.name not in ("config.json", WEIGHTS_INDEX) \
                and not f.name.endswith(".tmp") and (out / f.name).resolve() != f.resolve():
            shutil.copy2(f, out / f.name)
    hf = json.loads((src / "config.json").read_text())
    hf["quantization_config"] = dict(FP8_QUANT_CONFIG)
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    if len(shards) > 1 or (src / WEIGHTS_INDEX).is_file():
        total = sum((out / s.name).stat().st_size for s in shards)
        (out / WEIGHTS_INDEX).write_text(json.dumps({"metadata": {"total_size": total},
                                                     "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    return str(out)

