"""Test helpers shared by the trainer-backend tests: a tiny CPU TorchBackend and a small batch."""
import torch

from rlrun.config import load
from rlrun.train.base import TrainBatch
from rlrun.train.torch_backend import TorchBackend


def torch_backend(*overrides: str, total_steps: int = 10) -> TorchBackend:
    """An initialised single-rank TorchBackend for the default (tiny, CPU) config + overrides."""
    b = TorchBackend(load(list(overrides)), rank=0, world_size=1, gpu_id=None, total_steps=total_steps)
    b.init()
    return b


def toy_batch(lens=(9, 12, 7, 15), starts=(5, 6, 4, 8), advantages=(1.0, -1.0, 0.5, -0.5),
              returns=None) -> TrainBatch:
    """Samples of `lens` tokens (seeded ids 4..46), responses from `starts`, every response token in
    the loss, a constant advantage (and return, if given) per sample."""
    g = torch.Generator().manual_seed(0)
    toks = [torch.randint(4, 47, (n,), generator=g) for n in lens]
    resp = [n - s for n, s in zip(lens, starts)]
    per_token = lambda vals: None if vals is None else [torch.full((r,), float(v)) for r, v in zip(resp, vals)]  # noqa: E731
    return TrainBatch(toks, list(starts), [torch.ones(r) for r in resp], advantages=per_token(advantages),
                      returns=per_token(returns))
