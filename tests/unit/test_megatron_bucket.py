"""rlrun.train.megatron.packing.bucket (train.cuda_graphs' shape buckets): the padded micro-batch
has the bucket's shapes, and the loss over its rows is the unpadded loss."""
import pytest
import torch

from rlrun.algo import AlgoParams, compute_loss
from rlrun.config import load
from rlrun.train.megatron.packing import bucket, pack


def _samples(lens, starts, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 100, (n,), generator=g) for n in lens], starts


@pytest.mark.parametrize("lens,starts,granule,length,segments,max_seqlen", [
    ([7, 12, 5], [2, 3, 1], 16, 32, 4, 16),   # 24 tokens -> 32; 3 samples + pad -> 4 segments; longest 12 -> 16
    ([30], [4], 16, 32, 2, 32),               # one sample: the dense causal path (max_seqlen = T)
    ([16, 16], [1, 1], 16, 32, 4, 16),        # no pad needed (an empty pad segment); longest 16
    ([3, 28], [1, 1], 16, 32, 4, 31),         # longest 28 -> 32, capped below T (the dense path is one sample's)
])
def test_bucket_shapes(lens, starts, granule, length, segments, max_seqlen):
    tokens, starts = _samples(lens, starts)
    mb = pack(tokens, starts, list(range(len(lens))), 1, torch.device("cpu"))
    b = bucket(mb, granule)
    assert b.tokens.shape == b.position_ids.shape == (1, length)
    assert b.cu_seqlens.tolist()[:len(lens) + 1] == mb.cu_seqlens.tolist()
    assert b.cu_seqlens.numel() == segments + 1 and b.cu_seqlens[-1] == length
    assert b.logit_rows.numel() == b.targets.numel() == length
    assert b.response_cu.numel() == segments + 1 and b.response_cu[-1] == length
    assert b.response_tokens == mb.response_tokens
    assert b.max_seqlen == max_seqlen >= max(lens)
    total = sum(lens)
    assert b.position_ids[0, total:].tolist() == list(range(length - total))  # the pad segment restarts at 0


def test_loss_over_bucketed_rows_equals_the_unpadded_loss():
    cfg = load(["algo.entropy_coef=0.01", "algo.use_kl_loss=true"])
    params = AlgoParams.from_config(cfg)
    tokens, starts = _samples([9, 14, 6], [2, 5, 1], seed=3)
    mb = pack(tokens, starts, [0, 1, 2], 1, torch.device("cpu"))
    b = bucket(mb, 16)
    r, rows = mb.response_tokens, b.logit_rows.numel()
    g = torch.Generator().manual_seed(4)
    logp = -torch.rand(rows, generator=g)  # the pad rows' log-probs are whatever the model gives them
    entropy = torch.rand(rows, generator=g)
    old, ref = -torch.rand(r, generator=g), -torch.rand(r, generator=g)
    adv, mask = torch.randn(r, generator=g), (torch.rand(r, generator=g) > 0.2).float()
    pad = lambda t: torch.cat([t, t.new_zeros(rows - r)])  # what the backend's _loss_inputs does
    norm = torch.tensor(3.0)
    loss, metrics = compute_loss(logp[:r], old, ref, None, adv, mask, entropy[:r], params,
                                 cu_seqlens=mb.response_cu, normalizer=norm)
    loss_b, metrics_b = compute_loss(logp, pad(old), pad(ref), None, pad(adv), pad(mask), entropy, params,
                                     cu_seqlens=b.response_cu, normalizer=norm)
    torch.testing.assert_close(loss_b, loss, rtol=1e-6, atol=1e-7)
    for k in metrics:
        torch.testing.assert_close(metrics_b[k], metrics[k], rtol=1e-6, atol=1e-7, msg=k)
