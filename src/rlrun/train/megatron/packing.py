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
