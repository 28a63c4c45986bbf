"""The multi-token prediction loss of the megatron backend (train.mtp.enabled; rlrun.train.megatron.mtp runs the block).
Pure torch: megatron-core is not imported.

MTP layer k (0-based) at packed position t reads the main hidden state at t and the embedding of token t + 1 + k
(megatron-core rolls the ids per packed sequence) and predicts token t + 2 + k: a response token at position p is
the main head's target at row p - 1 and MTP layer k's at row p - 2 - k, inside its own sample."""
from __future__ import annotations

import torch

from rlrun.algo.token_stats import linear_logp_entropy


def mtp_rows(logit_rows: torch.Tensor, cu_seqlens: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, valid) of MTP layer k for the response targets of `logit_rows` (the main head's rows): row - 1 - k, valid
    where it stays inside the target's sample (a prompt shorter than k + 2 tokens leaves the first targets without
    one). Invalid rows read row 0 and carry no loss."""
    starts = cu_seqlens[torch.searchsorted(cu_seqlens, logit_rows, right=True) - 1]
    rows = logit_rows - 1 - k
    valid = rows >= starts
    return torch.where(valid, rows, torch.zeros_like(rows)), valid


def mtp_loss(hidden: list[torch.Tensor], weight: torch.Tensor, x: dict[str, torch.Tensor], *, vocab_start: int,
             group, gather, token_count: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(sum over MTP layers of their loss / token_count, [each layer's sum of loss-masked token losses]) of one
    micro-batch: hidden = the MTP layers' [s, b, h] hidden states, gather = what makes the output layer's input of
    them (the backend's _hidden_for_output), x = the micro-batch's loss inputs (logit_rows, targets, loss_mask,
    cu_seqlens). token_count: the loss-masked response tokens of the global batch (all DP ranks)."""
    total, sums = None, []
    mask = x["loss_mask"].to(torch.float32)
    for k, h in enumerate(hidden):
        rows, valid = mtp_rows(x["logit_rows"], x["cu_seqlens"], k)
        logp, _ = linear_logp_entropy(gather(h)[rows, 0], weight, x["targets"], vocab_start=vocab_start, group=group)
        s = -(logp * mask * valid).sum()
        sums.append(s.detach())
        total = s if total is None else total + s
    return total / token_count, sums
