"""Triton kernels for the per-row softmax statistics of rlrun.algo.token_stats.linear_logp_entropy.

The torch path turns each chunk of bf16 logits into an fp32 copy and makes ~6 passes over it
(max, subtract, exp, two sums, gather; in the backward exp, add, multiply, scatter, cast): on an
H100 with Qwen3-1.7B's 151936-token vocabulary that is ~20 of its 37 ms per 4096 tokens, next to
~16 ms of lm-head GEMMs (docs/benchmarks.md). Here each row of the bf16 logits is read twice in
the forward (max, then the sums) and once in the backward, which writes the bf16 logits'
gradient in place; the arithmetic is fp32 as before, on the same bf16-rounded logits.

- `row_stats(logits, target, mine)` -> (max m, sum exp(z - m), sum exp(z - m) * (z - m), z[target])
  per row, over this rank's vocabulary shard (the caller combines shards);
- `logits_grad_(logits, lse, h, g_logp, g_h, target, mine)`: logits <- the gradient of
  g_logp * log p(target) + g_h * H with respect to them (p = softmax, H = entropy):
  -p * (g_logp + g_h * (log p + H)) + g_logp at the target.

`available(t)` says whether they run for tensor t (CUDA and Triton; the CPU tests run them through
Triton's interpreter).
"""
from __future__ import annotations

import functools

import torch

_BLOCK = 4096


@functools.cache
def _kernels():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def stats(x_ptr, stride, target_ptr, mine_ptr, m_ptr, s_ptr, ez_ptr, t_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = x_ptr + row * stride
        cols = tl.arange(0, BLOCK)
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(base + start + cols, mask=start + cols < n_cols, other=float("-inf")).to(tl.float32)
            m = tl.maximum(m, x)
        row_max = tl.max(m, axis=0)
        s = tl.zeros([BLOCK], tl.float32)
        ez = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            inside = start + cols < n_cols
            z = tl.load(base + start + cols, mask=inside, other=0.0).to(tl.float32) - row_max
            e = tl.where(inside, tl.exp(z), 0.0)
            s += e
            ez += e * z
        t = tl.load(target_ptr + row)
        tz = tl.load(base + t).to(tl.float32) * tl.load(mine_ptr + row).to(tl.float32)
        tl.store(m_ptr + row, row_max)
        tl.store(s_ptr + row, tl.sum(s, axis=0))
        tl.store(ez_ptr + row, tl.sum(ez, axis=0))
        tl.store(t_ptr + row, tz)

    @triton.jit
    def grad(x_ptr, stride, lse_ptr, h_ptr, gl_ptr, gh_ptr, target_ptr, mine_ptr, n_cols,
             HAS_GL: tl.constexpr, HAS_GH: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = x_ptr + row * stride
        cols = tl.arange(0, BLOCK)
        lse = tl.load(lse_ptr + row)
        gl = 0.0
        if HAS_GL:
            gl = tl.load(gl_ptr + row)
        t = tl.load(target_ptr + row)
        at_target = gl * tl.load(mine_ptr + row).to(tl.float32)
        if HAS_GH:
            h = tl.load(h_ptr + row)
            gh = tl.load(gh_ptr + row)
        for start in range(0, n_cols, BLOCK):
            inside = start + cols < n_cols
            x = tl.load(base + start + cols, mask=inside, other=0.0)
            lp = x.to(tl.float32) - lse
            p = tl.exp(lp)
            if HAS_GH:
                g = -p * (gl + gh * (lp + h))
            else:
                g = -p * gl
            g = tl.where(start + cols == t, g + at_target, g)
            tl.store(base + start + cols, g.to(x.dtype), mask=inside)

    return stats, grad


def available(t: torch.Tensor) -> bool:
    return t.is_cuda and _kernels() is not None


def row_stats(logits: torch.Tensor, target: torch.Tensor, mine: torch.Tensor):
    """logits [R, V] (row-contiguous); target [R] column in this shard (clamped); mine [R] bool."""
    stats, _ = _kernels()
    rows, n = logits.shape
    target, mine = target.contiguous(), mine.contiguous()
    m, s, ez, t = (torch.empty(rows, dtype=torch.float32, device=logits.device) for _ in range(4))
    stats[(rows,)](logits, logits.stride(0), target, mine, m, s, ez, t, n, BLOCK=_BLOCK)
    return m, s, ez, t


def logits_grad_(logits: torch.Tensor, lse, h, g_logp, g_h, target, mine) -> torch.Tensor:
    """Overwrite logits [R, V] with their gradient (see the module docstring); returns them."""
    _, grad = _kernels()
    rows, n = logits.shape
    # per-row vectors as the kernel indexes them (an upstream gradient may be a stride-0 expand)
    lse, h, target, mine = (x.contiguous() for x in (lse, h, target, mine))
    g_logp, g_h = (None if x is None else x.float().contiguous() for x in (g_logp, g_h))
    dummy = lse  # unused pointer slots when a gradient is absent
    grad[(rows,)](logits, logits.stride(0), lse, h if g_h is not None else dummy,
                  g_logp if g_logp is not None else dummy, g_h if g_h is not None else dummy, target, mine, n,
                  HAS_GL=g_logp is not None, HAS_GH=g_h is not None, BLOCK=_BLOCK)
    return logits
