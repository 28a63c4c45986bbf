"""Layout helpers: padded [B, T] tensors with masks vs packed 1-D tensors with cu_seqlens.

Every sequence-level reduction in rlrun.algo goes through these helpers, so a function works on
both layouts and the two layouts give the same numbers (tested). No Python loop runs over tokens.
"""

from __future__ import annotations

import torch


def _lengths(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Per-sequence lengths. The layout is checked where that costs no device sync (cu_seqlens on
    the host); on an accelerator the trainers pass offsets they built themselves, and reading
    them back would stall every loss computation (and cannot be captured in a CUDA graph)."""
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D and hold B+1 offsets; got shape {tuple(cu_seqlens.shape)}")
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    if cu_seqlens.device.type == "cpu":
        if int(cu_seqlens[0]) != 0:
            raise ValueError(f"cu_seqlens must start at 0; got {cu_seqlens.tolist()[:8]}")
        if bool((lengths < 0).any()):
            raise ValueError(f"cu_seqlens must be non-decreasing; got {cu_seqlens.tolist()[:8]}")
    return lengths


def segment_ids(cu_seqlens: torch.Tensor, total: int | None = None) -> torch.Tensor:
    """Sequence index of every packed token: cu_seqlens [0, 2, 5] -> [0, 0, 1, 1, 1].
    total: the number of packed tokens (cu_seqlens[-1]) when the caller knows it - then no
    device sync is needed to size the result."""
    lengths = _lengths(cu_seqlens)
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=cu_seqlens.device), lengths,
                                   output_size=total)


def seq_sum(x: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sequence sum: [B, T] -> [B] (padded) or packed [N] -> [B]."""
    if cu_seqlens is None:
        return x.sum(dim=-1)
    ids = segment_ids(cu_seqlens, x.numel())
    out = torch.zeros(cu_seqlens.numel() - 1, dtype=x.dtype, device=x.device)
    return out.index_add(0, ids, x)


def seq_broadcast(v: torch.Tensor, like: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """Broadcast a per-sequence value [B] back to every token of `like`'s layout."""
    if cu_seqlens is None:
        return v.unsqueeze(-1).expand_as(like)
    return v[segment_ids(cu_seqlens, like.numel())]


def packed_to_padded(x: torch.Tensor, cu_seqlens: torch.Tensor, pad_value: float = 0.0):
    """Packed [N] -> (padded [B, T_max], mask [B, T_max]) with right padding."""
    lengths = _lengths(cu_seqlens)
    batch, t_max = lengths.numel(), int(lengths.max()) if lengths.numel() else 0
    ids = segment_ids(cu_seqlens, x.numel())
    cols = torch.arange(x.numel(), device=x.device) - cu_seqlens[:-1][ids]
    out = torch.full((batch, t_max), pad_value, dtype=x.dtype, device=x.device)
    out[ids, cols] = x
    mask = torch.zeros((batch, t_max), dtype=torch.bool, device=x.device)
    mask[ids, cols] = True
    return out, mask


def padded_to_packed(x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Inverse of packed_to_padded: take the first len_i entries of every row."""
    ids = segment_ids(cu_seqlens)
    cols = torch.arange(ids.numel(), device=x.device) - cu_seqlens[:-1][ids]
    return x[ids, cols]
