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
    core = t.megatron or {}
    if core.get("moe_router_fusion"):
        yield Problem("train.megatron.moe_router_fusion", "routing replay: megatron-core's fused top-k "
                      "(Transformer Engine's fused_topk_with_score_function) returns before its RouterReplay is asked "
                      "(moe_utils.topk_routing_with_score_function), so the engine's experts would be ignored",
                      "remove train.megatron.moe_router_fusion or set rollout.routing_replay=false", True)
    if core.get("moe_router_load_balancing_type") in ("sinkhorn", "quantile_balancing"):
        yield Problem("train.megatron.moe_router_load_balancing_type", "routing replay: megatron-core's "
                      f"{core['moe_router_load_balancing_type']} routing does not go through its RouterReplay "
                      "(TopKRouter.routing), so the engine's experts would be ignored",
                      "remove train.megatron.moe_router_load_balancing_type or set rollout.routing_replay=false",
                      core["moe_router_load_balancing_type"])
    if t.cuda_graphs:
        yield Problem("train.cuda_graphs", "routing replay: a captured graph replays the routing it captured, not "
                      "the engine's", "set train.cuda_graphs=false or rollout.routing_replay=false", True)
