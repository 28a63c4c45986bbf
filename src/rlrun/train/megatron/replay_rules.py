"""What the megatron backend's routing replay (rlrun.train.megatron.routing) cannot do, refused by rlrun
validate (pure Python: BackendKind.routing_replay_check)."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem


def check(cfg) -> Iterator[Problem]:
    p, t = cfg.parallelism, cfg.train
    if p.cp > 1:
        yield Problem("parallelism.cp", "routing replay on the megatron backend: context parallelism splits each "
                      "sample's tokens over CP ranks in zigzag, and the engine's expert ids are not split that way "
                      "yet", "set parallelism.cp=1 or rollout.routing_replay=false", p.cp)
    if p.pp > 1 and t.recompute.granularity is not None:
        yield Problem("train.recompute.granularity", "routing replay on the megatron backend with pipeline "
                      "parallelism: a layer recomputed in the backward would replay the ids of the micro-batch "
                      "whose forward ran last (megatron-core's REPLAY_BACKWARD list is not wired)",
                      "set train.recompute.granularity=null, parallelism.pp=1 or rollout.routing_replay=false",
                      t.recompute.granularity)
    if t.cuda_graphs:
        yield Problem("train.cuda_graphs", "routing replay: a captured graph replays the routing it captured, not "
                      "the engine's", "set train.cuda_graphs=false or rollout.routing_replay=false", True)
