"""Rotary embeddings for packed (THD) micro-batches without host synchronisation.

megatron-core's unfused THD rope (rope_utils._apply_rotary_pos_emb_thd) reads the sequence
lengths back to the host (`cu_seqlens.tolist()`, `cu_seqlens[-1].item()`) for every call: for q
and k in every layer, i.e. 4 synchronisations per layer and ~112 per forward of Qwen3-1.7B. Each
one drains the GPU's queue, so the forward can never run ahead of megatron-core's Python. Its
only sync-free path is Transformer Engine's fused rope, which is absent here.

`install()` fills megatron-core's fused-rope slots (rope_utils.fused_apply_rotary_pos_emb[_thd],
used when config.apply_rope_fusion is set) with the same arithmetic as its unfused path:
- THD: the position of each packed token is its offset from the start of its sequence, found on
  the device (searchsorted over cu_seqlens), and the angles are gathered per token - the
  positions restart at 0 for every sequence exactly as the per-sequence loop does;
- cos/sin are computed once per (angle table, cu_seqlens) and reused by every layer of the
  forward (and by the recompute), instead of twice per call.
Context parallelism (THD split over CP ranks) is not covered: the SDPA attention refuses cp > 1.
"""
from __future__ import annotations

import torch

ENABLED = True  # a module switch for the step profiler (megatron-core's own rope when False)


class _CosSinCache:
    """The last (angles, cu_seqlens, dtype) -> (cos, sin). One micro-batch's forward calls rope
    2 x num_layers times with the same angle table and cu_seqlens; strong references to both keep
    their ids from being reused by other tensors while the entry lives."""

    def __init__(self):
        self.key, self.value = None, None

    def get(self, freqs: torch.Tensor, cu: torch.Tensor | None, dtype: torch.dtype, tokens: int):
        key = (freqs, cu, dtype, tokens)
        if self.key is not None and all(a is b for a, b in zip(self.key[:2], key[:2])) and self.key[2:] == key[2:]:
            return self.value
        if cu is None:  # bshd: angles are already [s, 1, 1, rot] in sequence order
            angles = freqs
        else:
            angles = freqs[_positions(cu, tokens)].reshape(tokens, 1, freqs.shape[-1])
        self.key, self.value = key, (torch.cos(angles).to(dtype), torch.sin(angles).to(dtype))
        return self.value


_CACHE = _CosSinCache()


def _positions(cu_seqlens: torch.Tensor, tokens: int) -> torch.Tensor:
    """Position of each of `tokens` packed tokens within its own sequence, on the device."""
    cu = cu_seqlens.to(torch.int64)
    t = torch.arange(tokens, device=cu.device)
    seq = torch.searchsorted(cu[1:].contiguous(), t, right=True)
    return t - cu[seq]


def _rotate_half(x: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """[-x2, x1] over the two halves, or over (odd, even) pairs when interleaved (GLM-4).
    Not megatron-core's rope_utils._rotate_half: its interleaved branch indexes 4-D [s, b, h, d]
    tensors, and THD tensors are 3-D; this module also imports without megatron-core (CPU tests)."""
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    pairs = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1)
    return pairs.flatten(-2)


def _apply(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    rot = cos.shape[-1]
    x = t[..., :rot]
    out = x * cos + _rotate_half(x, interleaved) * sin
    return out if rot == t.shape[-1] else torch.cat((out, t[..., rot:]), dim=-1)


def apply_thd(t: torch.Tensor, cu_seqlens: torch.Tensor, freqs: torch.Tensor, cp_size: int = 1,
              cp_rank: int = 0, interleaved: bool = False) -> torch.Tensor:
    """t [tokens, heads, d] of packed sequences; freqs [max_seqlen, 1, 1, rot] angles."""
    if cp_size != 1:
        raise NotImplementedError("rlrun's THD rope runs cp=1 (the SDPA attention refuses cp > 1)")
    cos, sin = _CACHE.get(freqs, cu_seqlens, t.dtype, t.shape[0])
    return _apply(t, cos, sin, interleaved)


def apply_bshd(t: torch.Tensor, freqs: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    """t [s, b, heads, d]; freqs [s, 1, 1, rot] angles."""
    cos, sin = _CACHE.get(freqs, None, t.dtype, t.shape[0])
    return _apply(t, cos, sin, interleaved)


def install(config) -> None:
    """Route megatron-core's rope through apply_thd / apply_bshd for models built from `config`
    (a TransformerConfig; set after its validation, which would ask for Transformer Engine)."""
    from megatron.core.models.common.embeddings import rope_utils
    if not ENABLED or config.context_parallel_size != 1 or config.multi_latent_attention or config.mrope_section is not None:
        return  # megatron-core's own paths (not built by rlrun's spec today)
    rope_utils.fused_apply_rotary_pos_emb = apply_bshd
    rope_utils.fused_apply_rotary_pos_emb_thd = apply_thd
    config.apply_rope_fusion = True
