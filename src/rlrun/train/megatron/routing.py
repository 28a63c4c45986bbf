"""Routing replay (rollout.routing_replay, R3) in the megatron backend, through megatron-core's own hook
(0.19.2: TransformerConfig.moe_enable_routing_replay gives every TopKRouter a RouterReplay,
megatron/core/transformer/moe/router_replay.py). Before a micro-batch's forward each router of the actor gets
the engine's expert ids of its layer (RouterReplay.layer_number: the global 1-based layer number) and the
REPLAY_FORWARD action: megatron-core then takes those ids and gathers their probabilities from its own scores
(`scores.gather(1, target_ids)`), the same replay as the torch backend's (rlrun.rollout.routing).

What megatron-core's replay cannot do, the rules refuse (rlrun.train.megatron.rules via the backend's
routing_replay_check): a row it should route itself (it has no -1: positions without an engine row, each
sample's last token and the pad segment, get experts 0..k-1, whose output nothing reads: a causal model's
last position feeds no other one), context parallelism (a sample's tokens are split over CP ranks in zigzag),
pipeline parallelism with recompute (a recomputed layer would replay the ids of the micro-batch set last) and
train.cuda_graphs (a graph replays the routing it captured)."""
from __future__ import annotations

import torch


def replay_routers(model) -> list:
    """The modules of `model` (a GPTModel, under its DDP wrapper or not) that hold a RouterReplay."""
    return [m for m in model.modules() if getattr(m, "router_replay", None) is not None]


def packed_replay_ids(routed: list[torch.Tensor], lengths: list[int], total: int, top_k: int) -> torch.Tensor:
    """Per-sample engine ids ([rows, layers, top_k], rows <= length) -> [total, layers, top_k] long for the packed
    row of those samples (total >= sum(lengths): the pad segment); positions without a row get experts 0..k-1."""
    layers = int(routed[0].shape[1]) if routed else 0
    out = torch.arange(top_k, dtype=torch.long).expand(total, layers, top_k).clone()
    offset = 0
    for ids, n in zip(routed, lengths):
        rows = min(int(ids.shape[0]), n)
        out[offset:offset + rows] = ids[:rows].long()
        offset += n
    return out


def set_replay(routers: list, ids: torch.Tensor, sp_rank: int = 0, sp_size: int = 1) -> None:
    """Each router replays its layer's ids for the next forward ([tokens, layers, top_k] of the packed row on
    the device; sequence parallel: this TP rank's 1/sp_size of the rows, which is what its router sees)."""
    from megatron.core.transformer.moe.router_replay import RouterReplayAction

    if sp_size > 1:
        ids = ids.chunk(sp_size, dim=0)[sp_rank]
    for router in routers:
        replay = router.router_replay
        replay.clear_indices()  # one micro-batch at a time (no REPLAY_BACKWARD list kept across them)
        replay.set_target_indices(ids[:, replay.layer_number - 1].contiguous())
        replay.set_router_replay_action(RouterReplayAction.REPLAY_FORWARD)


def clear_replay(routers: list) -> None:
    """The routers route themselves again (the reference and teacher forwards, the next step's first)."""
    for router in routers:
        router.router_replay.clear_indices()
        router.router_replay.clear_router_replay_action()
