"""Log-prob of the target token and entropy of the softmax, for logits whose vocabulary may be
sharded over tensor-parallel ranks (the max, the normaliser, the target logit and the entropy are
summed over the shards; gradients need no communication: each shard's needs only the global logZ
and H from the forward).

- `entropy`: no gradient, in chunks of rows, so its transient fp32 copy, exp and product never
  exceed a chunk; the metric when the loss has no entropy term. The log-probs then come from the
  backend's usual cross-entropy (measured fastest on the H100, docs/benchmarks.md).
- `logp_and_entropy`: both differentiable, for an entropy term in the loss. Autograd through a
  separate softmax would keep extra [N, vocab] fp32 buffers (~2.5 GB each per 4096 tokens with a
  151936-token vocabulary); here one fp32 log-softmax is built in place and kept for a hand-written
  backward:   d logp_t / dz_i = 1[i = t] - p_i          d H / dz_i = -p_i (log p_i + H)
- `linear_logp_entropy`: the same two from the hidden states and the output-layer weight, logits
  built chunk by chunk and rebuilt in the backward (one more lm-head GEMM), so no [N, vocab]
  tensor outlives a chunk: ~10 GB less at 4096 tokens with a 151936-token vocabulary (the bf16
  logits, the fp32 copy, the softmax saved for the backward and their gradients). The megatron
  backend's path, through megatron-core's GPTModel output_processor hook.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from rlrun.algo import token_kernels

_CHUNK = 2048  # rows per chunk of the transient [rows, vocab] products
_LINEAR_CHUNK_BYTES = 512 << 20  # fp32 logits per chunk of linear_logp_entropy


def _all_reduce(t: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=op, group=group)
    return t


def _exp_sums(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum exp z, sum exp(z) * z) per row of max-shifted logits z: the softmax normaliser and the
    entropy's numerator from one exp (H = log s - ez / s)."""
    e = z.exp()
    return e.sum(-1), e.mul_(z).sum(-1)


def _grad_from_logp_(lp: torch.Tensor, h, g_logp, g_h, local, mine) -> torch.Tensor:
    """The logits' gradient for rows whose log-softmax is `lp` (overwritten with it):
    -p * (g_logp + g_h * (log p + H)), plus g_logp at the target where this rank holds it."""
    if g_h is None:  # -p * g_logp
        g = lp.exp_().mul_(-g_logp[:, None] if g_logp is not None else 0.0)
    else:
        p = lp.exp()
        g = lp.add_(h[:, None]).mul_(g_h[:, None])
        if g_logp is not None:
            g.add_(g_logp[:, None])
        g.mul_(p).neg_()
    if g_logp is not None:
        g.scatter_add_(-1, local[:, None], (g_logp * mine)[:, None].to(g.dtype))
    return g


class _LogpEntropy(torch.autograd.Function):
    # Passes over the [N, V] fp32 buffer are what this costs (it is memory-bound), so each chunk
    # takes one exp for both the normaliser and the entropy, and the backward works in place.
    @staticmethod
    def forward(ctx, logits, targets, vocab_start: int, group):
        z = logits.to(torch.float32, copy=True)  # worked on in place below
        z.sub_(_all_reduce(z.amax(dim=-1, keepdim=True), group, dist.ReduceOp.MAX))
        s = torch.empty(z.shape[0], dtype=z.dtype, device=z.device)
        ez = torch.empty_like(s)  # sum of exp(z) * z: the entropy's numerator
        for i in range(0, z.shape[0], _CHUNK):
            s[i:i + _CHUNK], ez[i:i + _CHUNK] = _exp_sums(z[i:i + _CHUNK])
        s, ez = _all_reduce(s, group), _all_reduce(ez, group)
        log_s = s.log()
        h = log_s - ez / s  # H = log sum exp(z) - sum softmax(z) * z, with z shifted by the max
        lsm = z.sub_(log_s[:, None])  # now the log-softmax, in place
        local = targets - vocab_start
        mine = (local >= 0) & (local < lsm.shape[-1])
        local = local.clamp(0, lsm.shape[-1] - 1)
        logp = _all_reduce(lsm.gather(-1, local[:, None])[:, 0] * mine, group)
        ctx.save_for_backward(lsm, local, mine, h)
        ctx.in_dtype = logits.dtype
        ctx.set_materialize_grads(False)
        return logp, h

    @staticmethod
    def backward(ctx, g_logp, g_h):
        lsm, local, mine, h = ctx.saved_tensors
        grad = lsm  # overwritten chunk by chunk: the log-softmax is not needed after this
        for i in range(0, grad.shape[0], _CHUNK):
            sl = slice(i, i + _CHUNK)
            _grad_from_logp_(grad[sl], h[sl], None if g_logp is None else g_logp[sl],
                             None if g_h is None else g_h[sl], local[sl], mine[sl])
        return grad.to(ctx.in_dtype), None, None, None


@torch.no_grad()
def entropy(logits: torch.Tensor, *, group=None) -> torch.Tensor:
    """Entropy per row (fp32, not differentiable) in chunks of rows, so the transient fp32 copy,
    exp and product never exceed a chunk; for the metric when the loss has no entropy term."""
    m = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
    s, ez = torch.empty_like(m), torch.empty_like(m)
    for i in range(0, logits.shape[0], _CHUNK):
        m[i:i + _CHUNK] = logits[i:i + _CHUNK].amax(-1).float()
    m = _all_reduce(m, group, dist.ReduceOp.MAX)
    for i in range(0, logits.shape[0], _CHUNK):
        s[i:i + _CHUNK], ez[i:i + _CHUNK] = _exp_sums(logits[i:i + _CHUNK].float().sub_(m[i:i + _CHUNK, None]))
    s, ez = _all_reduce(s, group), _all_reduce(ez, group)
    return s.log() - ez / s


def logp_and_entropy(logits: torch.Tensor, targets: torch.Tensor, *, vocab_start: int = 0,
                     group=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy) per row of `logits` [N, V_local], fp32, both differentiable.

    targets: [N] ids in the full vocabulary; this rank's logits cover [vocab_start, vocab_start +
    V_local). group: the tensor-parallel group the vocabulary is sharded over (None: not sharded).
    The backward overwrites the saved log-softmax, so call backward at most once (no retain_graph)."""
    return _LogpEntropy.apply(logits, targets, vocab_start, group)


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # in the model's dtype, then fp32: the same rounding as an output layer followed by .float()
    return (hidden @ weight.t()).float()


def _accumulate_wgrad(acc: torch.Tensor, grad_z: torch.Tensor, hidden: torch.Tensor) -> None:
    """acc (fp32) += grad_z^T @ hidden: on CUDA one bf16 GEMM with an fp32 output (torch >= 2.8)."""
    if acc.is_cuda and grad_z.dtype != torch.float32:
        try:
            torch.addmm(acc, grad_z.t(), hidden, out_dtype=torch.float32, out=acc)
            return
        except (RuntimeError, TypeError):
            pass
    acc.add_((grad_z.t() @ hidden).float())


def rebase(m_local, s_local, ez_local, t_local, m, mine) -> list[torch.Tensor]:
    """One vocabulary shard's (sum e^(z-m_local), sum e^(z-m_local) (z-m_local), raw target logit)
    -> the same sums shifted by the global max m (the torch path's z = logits - m), and the
    target's shifted logit where this shard holds it: sums over shards then add up."""
    scale = (m_local - m).exp()
    return [s_local * scale, scale * (ez_local + (m_local - m) * s_local), (t_local - m) * mine]


class _LinearLogpEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, vocab_start: int, group, rows: int):
        n, v = hidden.shape[0], weight.shape[0]
        local = targets - vocab_start
        mine = (local >= 0) & (local < v)
        local = local.clamp(0, v - 1)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)  # log sum exp of the full-vocab logits
        h, logp = torch.empty_like(lse), torch.empty_like(lse)
        fused = token_kernels.available(hidden)
        for i in range(0, n, rows):
            sl = slice(i, i + rows)
            if fused:  # one Triton kernel over the bf16 chunk (rlrun.algo.token_kernels)
                m_local, s_local, ez_local, t_local = token_kernels.row_stats(hidden[sl] @ weight.t(), local[sl], mine[sl])
                m = _all_reduce(m_local.clone(), group, dist.ReduceOp.MAX)
                sums = rebase(m_local, s_local, ez_local, t_local, m, mine[sl])
            else:
                z = _chunk_logits(hidden[sl], weight)
                m = _all_reduce(z.amax(dim=-1), group, dist.ReduceOp.MAX)
                z.sub_(m[:, None])
                sums = [*_exp_sums(z), z.gather(-1, local[sl, None])[:, 0] * mine[sl]]
            # one collective for the normaliser, the entropy numerator and the (one rank's) target logit
            s, ez, target = _all_reduce(torch.stack(sums), group)
            log_s = s.log()
            lse[i:i + rows], h[i:i + rows], logp[i:i + rows] = m + log_s, log_s - ez / s, target - log_s
        ctx.save_for_backward(hidden, weight, local, mine, lse, h)
        ctx.rows = rows
        ctx.set_materialize_grads(False)
        return logp, h

    @staticmethod
    def backward(ctx, g_logp, g_h):
        hidden, weight, local, mine, lse, h = ctx.saved_tensors
        rows = ctx.rows
        grad_hidden = torch.empty_like(hidden)
        # a frozen output layer (model.lora without it in modules_to_save) takes no weight gradient
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        fused = token_kernels.available(hidden)
        for i in range(0, hidden.shape[0], rows):
            hc, sl = hidden[i:i + rows], slice(i, i + rows)
            gl, gh = None if g_logp is None else g_logp[sl], None if g_h is None else g_h[sl]
            if fused:  # the rebuilt bf16 logits become their gradient in place
                g = token_kernels.logits_grad_(hc @ weight.t(), lse[sl], h[sl], gl, gh, local[sl], mine[sl])
            else:
                lp = _chunk_logits(hc, weight).sub_(lse[sl, None])  # log p, rebuilt
                g = _grad_from_logp_(lp, h[sl], gl, gh, local[sl], mine[sl]).to(hidden.dtype)
            grad_hidden[sl] = g @ weight
            if grad_weight is not None:
                _accumulate_wgrad(grad_weight, g, hc)
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None


def linear_logp_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                        vocab_start: int = 0, group=None, rows: int | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy) per row for logits = hidden @ weight^T, fp32, both differentiable
    (through hidden and weight), without keeping the logits.

    hidden: [N, d] (already gathered over sequence parallelism; its gradient is this rank's
    partial sum when the vocabulary is sharded - the caller's TP region reduces it). weight:
    [V_local, d], this rank's rows [vocab_start, vocab_start + V_local) of the output layer.
    rows: rows per chunk (default: ~512 MB of fp32 logits)."""
    if rows is None:
        rows = max(64, _LINEAR_CHUNK_BYTES // (4 * weight.shape[0]))
    return _LinearLogpEntropy.apply(hidden, weight, targets, vocab_start, group, rows)
