"""Masked whitening: local statistics, and shared statistics across 2 gloo processes."""

import math

import pytest
import torch
import torch.distributed as dist

from gloo_ranks import run_on_gloo_ranks
from rlrun.algo import whiten


def test_local_whiten_hand_computed():
    # trained values 1, 2, 3, 4 (the 100 is masked out): mean 2.5, unbiased var 5/3
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    m = torch.tensor([1, 1, 1, 1, 0])
    s = math.sqrt(5 / 3)
    expected = torch.tensor([-1.5, -0.5, 0.5, 1.5, 97.5]) / s
    assert torch.allclose(whiten(x, m), expected, atol=1e-5)
    assert torch.allclose(whiten(x, m, shift_mean=False), expected + 2.5, atol=1e-5)


def test_empty_mask_is_an_error():
    with pytest.raises(ValueError, match="selects no token"):
        whiten(torch.ones(3), torch.zeros(3))


def _worker(rank, results):
    # rank 0 holds 1, 2; rank 1 holds 3, 4 and a masked 100 -> the global stats of the test above
    x = torch.tensor([1.0, 2.0]) if rank == 0 else torch.tensor([3.0, 4.0, 100.0])
    m = torch.tensor([1, 1]) if rank == 0 else torch.tensor([1, 1, 0])
    results[rank] = whiten(x, m, group=dist.group.WORLD).tolist()


def test_whiten_across_two_gloo_ranks():
    out = run_on_gloo_ranks(_worker)
    s = math.sqrt(5 / 3)
    assert out[0] == pytest.approx([-1.5 / s, -0.5 / s], abs=1e-5)
    assert out[1] == pytest.approx([0.5 / s, 1.5 / s, 97.5 / s], abs=1e-5)
