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

import re

import torch

BLOCK = (128, 128)
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
    padded[:n, :k] = w.float()
    blocks = padded.view(rows, bn, cols, bk)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # an all-zero block: any scale works
    scale = amax / E4M3_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
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
