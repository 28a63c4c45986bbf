"""Log-prob of the target token and entropy of the softmax, from one softmax, for logits whose
vocabulary may be sharded over tensor-parallel ranks.

Computing them separately (a cross-entropy for the log-probs, then softmax/logsumexp again for the
entropy) costs a second pass over an [N, vocab] fp32 tensor and two more such buffers at the peak:
with a 151936-token vocabulary that is ~2.5 GB per 4096 response tokens each. Here one fp32
log-softmax is built (in place), kept for the backward (the same one buffer a fused cross-entropy
keeps), and both gradients come from it:
    d logp_t / dz_i = 1[i = t] - p_i          d H / dz_i = -p_i (log p_i + H)
With TP the max, the normaliser, the target logit and the entropy are summed over the vocab shards
(three all-reduces in the forward, none in the backward: each shard's gradient needs only the
global logZ and H, which the forward already has).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

_CHUNK = 2048  # rows per chunk of the transient [rows, vocab] products


def _all_reduce(t: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=op, group=group)
    return t


class _LogpEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, vocab_start: int, group):
        lsm = logits.float()  # a copy for bf16/fp16 logits; fp32 logits get one below
        if lsm.data_ptr() == logits.data_ptr():
            lsm = lsm.clone()
        m = _all_reduce(lsm.max(dim=-1, keepdim=True).values, group, dist.ReduceOp.MAX)
        lsm.sub_(m)
        s = torch.empty(lsm.shape[0], dtype=lsm.dtype, device=lsm.device)
        for i in range(0, lsm.shape[0], _CHUNK):
            s[i:i + _CHUNK] = lsm[i:i + _CHUNK].exp().sum(-1)
        lsm.sub_(_all_reduce(s, group).log_()[:, None])  # now log softmax
        local = targets - vocab_start
        mine = (local >= 0) & (local < lsm.shape[-1])
        local = local.clamp(0, lsm.shape[-1] - 1)
        logp = _all_reduce(lsm.gather(-1, local[:, None])[:, 0] * mine, group)
        h = torch.empty_like(s)
        for i in range(0, lsm.shape[0], _CHUNK):
            c = lsm[i:i + _CHUNK]
            h[i:i + _CHUNK] = -(c.exp() * c).sum(-1)
        h = _all_reduce(h, group)
        ctx.save_for_backward(lsm, local, mine, h)
        ctx.in_dtype = logits.dtype
        ctx.set_materialize_grads(False)
        return logp, h

    @staticmethod
    def backward(ctx, g_logp, g_h):
        lsm, local, mine, h = ctx.saved_tensors
        grad = lsm  # overwritten chunk by chunk: the log-softmax is not needed after this
        for i in range(0, grad.shape[0], _CHUNK):
            c = grad[i:i + _CHUNK]
            p = c.exp()
            if g_h is not None:  # -p * (g_logp + g_h * (log p + H))
                c.add_(h[i:i + _CHUNK, None]).mul_(g_h[i:i + _CHUNK, None])
                if g_logp is not None:
                    c.add_(g_logp[i:i + _CHUNK, None])
            elif g_logp is not None:
                c.copy_(g_logp[i:i + _CHUNK, None].expand_as(c))
            else:
                c.zero_()
            c.mul_(p).neg_()
        if g_logp is not None:
            grad.scatter_add_(-1, local[:, None], (g_logp * mine)[:, None].to(grad.dtype))
        return grad.to(ctx.in_dtype), None, None, None


def logp_and_entropy(logits: torch.Tensor, targets: torch.Tensor, *, vocab_start: int = 0,
                     group=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy) per row of `logits` [N, V_local], fp32, both differentiable.

    targets: [N] ids in the full vocabulary; this rank's logits cover [vocab_start, vocab_start +
    V_local). group: the tensor-parallel group the vocabulary is sharded over (None: not sharded).
    The backward overwrites the saved log-softmax, so call backward at most once (no retain_graph)."""
    return _LogpEntropy.apply(logits, targets, vocab_start, group)
