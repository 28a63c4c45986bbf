"""Samples -> packed THD micro-batches for megatron-core (no padding to the longest sample).

A micro-batch is one row of concatenated samples with cu_seqlens; attention stays within each
sample (varlen attention), rope restarts per sample. Which samples share a row is decided by
rlrun.train.batching (the same for every backend). With sequence parallelism the row length must divide by TP: a
pad segment (its own sequence, never read back) is appended.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlrun.train.batching import to_device


@dataclass
class MicroBatch:
    index: list[int]             # sample indices in the TrainBatch
    tokens: torch.Tensor         # [1, T] packed ids (T padded to a multiple of `pad_to`)
    position_ids: torch.Tensor   # [1, T], restarting at 0 per sample
    cu_seqlens: torch.Tensor     # int32 [n_seq + 1] (+1 pad segment when padded)
    max_seqlen: int
    logit_rows: torch.Tensor     # rows of the packed logits that predict the response tokens
    targets: torch.Tensor        # the response tokens those rows predict
    response_cu: torch.Tensor    # cu_seqlens over the response tokens of the samples
    response_tokens: int         # response_cu[-1], kept on the host (reading the tensor would sync)
    loss_inputs: dict | None = None  # the train step's per-micro-batch loss tensors (megatron_backend)
    replay_ids: torch.Tensor | None = None  # routing replay: [T, layers, top_k] engine expert ids (routing.py)

    def packed_seq_params(self):
        return packed_seq_params(self.cu_seqlens, self.max_seqlen)


def packed_seq_params(cu_seqlens: torch.Tensor, max_seqlen: int):
    """megatron-core's THD description of one packed row (self-attention: q and kv alike)."""
    from megatron.core.packed_seq_params import PackedSeqParams
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens,
                           max_seqlen_q=max_seqlen, max_seqlen_kv=max_seqlen)


def pack(tokens: list[torch.Tensor], response_start: list[int], index: list[int], pad_to: int,
         device) -> MicroBatch:
    """Pack samples `index`; logits row t predicts token t+1, so a sample's response tokens
    [start, n) are predicted by rows [start-1, n-1)."""
    seqs = [tokens[i].reshape(-1) for i in index]
    lens = [int(s.numel()) for s in seqs]
    total = sum(lens)
    pad = (-total) % pad_to
    ids = torch.cat(seqs + ([torch.zeros(pad, dtype=seqs[0].dtype)] if pad else []))
    pos = torch.cat([torch.arange(n) for n in lens] + ([torch.arange(pad)] if pad else []))
    cu = [0]
    for n in lens + ([pad] if pad else []):
        cu.append(cu[-1] + n)
    rows, rcu = [], [0]
    for i, start, n in zip(index, cu, lens):
        s = response_start[i]
        rows.append(torch.arange(start + s - 1, start + n - 1))
        rcu.append(rcu[-1] + n - s)
    rows = torch.cat(rows)
    return MicroBatch(index=list(index), tokens=to_device(ids[None], device), position_ids=to_device(pos[None], device),
                      cu_seqlens=to_device(torch.tensor(cu, dtype=torch.int32), device), max_seqlen=max(lens + [pad]),
                      logit_rows=to_device(rows, device), targets=to_device(ids[rows + 1], device),
                      response_cu=to_device(torch.tensor(rcu), device), response_tokens=rcu[-1])


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def bucket(mb: MicroBatch, granule: int) -> MicroBatch:
    """`mb` padded to a few shapes, so that train.cuda_graphs can replay the graph of an earlier
    micro-batch (rlrun/train/megatron/graphs.py keys graphs by input shapes and max_seqlen):
    - tokens: the row length T rounded up to a multiple of `granule`, the pad a segment of its own
      at the end (positions from 0; its outputs feed nothing);
    - segments: cu_seqlens gets pow2 >= (samples + 1) segments, the extra ones of length 0;
    - response rows: as many as tokens (the pad rows read row 0 and belong to a pad sample in
      response_cu; their loss inputs are 0, so they add nothing to the loss or its metrics);
    - max_seqlen: T when one sample holds the row (the attention's dense causal path, exact for
      the sample because the pad comes after it), else pow2 >= the longest sample, below T.
    response_tokens stays the real count."""
    cu = mb.cu_seqlens
    n_seq = cu.numel() - 1
    total = int(mb.tokens.shape[1])
    length = -(-total // granule) * granule
    segments = _pow2_at_least(n_seq + 1)
    device = mb.tokens.device
    pad = length - total

    def extend(t: torch.Tensor, n: int, value) -> torch.Tensor:
        return torch.cat([t, torch.full((n,), value, dtype=t.dtype, device=device)]) if n else t

    tokens = torch.cat([mb.tokens, torch.zeros(1, pad, dtype=mb.tokens.dtype, device=device)], 1)
    positions = torch.cat([mb.position_ids, torch.arange(pad, dtype=mb.position_ids.dtype, device=device)[None]], 1)
    cu_b = extend(cu, segments + 1 - cu.numel(), length)  # the pad segment, then empty ones
    rows = mb.logit_rows.numel()
    response_cu = extend(mb.response_cu, segments + 1 - mb.response_cu.numel(), length)
    max_seqlen = length if n_seq == 1 else min(_pow2_at_least(mb.max_seqlen), length - 1)
    return MicroBatch(index=mb.index, tokens=tokens, position_ids=positions, cu_seqlens=cu_b, max_seqlen=max_seqlen,
                      logit_rows=extend(mb.logit_rows, length - rows, 0), targets=extend(mb.targets, length - rows, 0),
                      response_cu=response_cu, response_tokens=mb.response_tokens)
