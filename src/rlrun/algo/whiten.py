"""Masked whitening of advantages with statistics shared across data-parallel ranks.

Source: slime/utils/distributed_utils.py `distributed_masked_whiten` (normalize_advantages):
sum, sum of squares and token count are all-reduced over the process group, the variance gets
Bessel's correction when there are >= 2 tokens, and x -> (x - mean) * rsqrt(var + eps).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def whiten(
    x: torch.Tensor,
    mask: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    shift_mean: bool = True,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Whiten `x` over the tokens where `mask` is set, on this rank and all ranks of `group`.

    When torch.distributed is initialised the statistics are reduced over `group` (None = the
    default world group), so every rank applies the same affine map; otherwise they are local.
    Every rank must call this (even one with no tokens) or the collective hangs.
    """
    m = mask.to(torch.float32)
    xf = x.to(torch.float32)
    stats = torch.stack([(xf * m).sum(), (xf.pow(2) * m).sum(), m.sum()])
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(stats, group=group)
    total, total_sq, count = stats.unbind()
    if float(count) == 0:
        raise ValueError("whiten: the mask selects no token on any rank; nothing to normalise")
    mean = total / count
    var = total_sq / count - mean.pow(2)
    if float(count) >= 2:
        var = var * count / (count - 1)
    out = (xf - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out.to(x.dtype)
