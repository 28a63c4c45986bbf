"""Samples -> packed THD micro-batches for megatron-core (no padding to the longest sample).

A micro-batch is one row of concatenated samples with cu_seqlens; attention stays within each
sample (varlen attention), rope restarts per sample. Dynamic batching fills rows up to
max_tokens_per_gpu (first-fit over samples sorted by length, so rows come out even); without it,
micro_batch_size samples per row. With sequence parallelism the row length must divide by TP: a
pad segment (its own sequence, never read back) is appended.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def group_samples(lengths: list[int], max_tokens: int | None, micro_batch_size: int) -> list[list[int]]:
    """Sample indices of each micro-batch. max_tokens=None: fixed micro_batch_size samples each."""
    if max_tokens is None:
        return [list(range(i, min(i + micro_batch_size, len(lengths)))) for i in range(0, len(lengths), micro_batch_size)]
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        if n > max_tokens:
            raise ValueError(f"sample {i} has {n} tokens > train.max_tokens_per_gpu={max_tokens}: raise it to at "
                             "least data.max_prompt_len + rollout.max_response_len")
        k = next((r for r, free in enumerate(room) if free >= n), None)
        if k is None:
            rows.append([])
            room.append(max_tokens)
            k = len(rows) - 1
        rows[k].append(i)
        room[k] -= n
    return [sorted(r) for r in rows]


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

    def packed_seq_params(self):
        from megatron.core.packed_seq_params import PackedSeqParams
        return PackedSeqParams(qkv_format="thd", cu_seqlens_q=self.cu_seqlens, cu_seqlens_kv=self.cu_seqlens,
                               max_seqlen_q=self.max_seqlen, max_seqlen_kv=self.max_seqlen)


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
    return MicroBatch(index=list(index), tokens=ids[None].to(device), position_ids=pos[None].to(device),
                      cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device), max_seqlen=max(lens + [pad]),
                      logit_rows=rows.to(device), targets=ids[rows + 1].to(device),
                      response_cu=torch.tensor(rcu, device=device))
