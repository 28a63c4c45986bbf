"""MoE routing capture (the hf engine) and replay (the torch trainer) on transformers models: rollout
routing replay, R3 (rollout.routing_replay; docs/rollout.md "Routing replay").

A transformers MoE layer's router (Qwen3-MoE: `model.layers.{i}.mlp.gate`, Qwen3MoeTopKRouter in
transformers 5.x) returns (router_logits, routing_weights, expert_ids): softmax over all experts in
fp32, top-k, renormalised when `norm_topk_prob`, cast to the logits' dtype. Both sides work by a
forward hook on that module, so the model's own code runs unchanged:

* capture: the hook keeps `expert_ids` of the last forward (RoutingCapture.ids: [tokens, layers, top_k]
  int32, zeros for layers without experts, as SGLang's capture buffer);
* replay: the hook swaps `expert_ids` for the given ones and recomputes their weights from the same
  softmax of the trainer's own router logits (gathered at the given ids, renormalised as the model
  does), so the router still gets its gradient through the weights (what megatron-core's RouterReplay
  REPLAY_FORWARD does: scores.gather(1, target_ids), megatron/core/transformer/moe/router_replay.py).
"""
from __future__ import annotations

import re

import torch

_ROUTER_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.mlp\.gate$")


def moe_routers(model) -> dict[int, torch.nn.Module]:
    """Decoder layer index -> its MoE router (a `layers.{i}.mlp.gate` with `top_k` and `num_experts`);
    empty for a dense model. Works through wrappers (LoRA's peft model) by the module names."""
    out = {}
    for name, module in model.named_modules():
        m = _ROUTER_NAME.search(name)
        if m and hasattr(module, "top_k") and hasattr(module, "num_experts"):
            out[int(m.group(1))] = module
    return out


def routing_shape(model) -> tuple[int, int]:
    """(num_layers, top_k) of the model's routed-experts rows (SGLang: num_hidden_layers, num_experts_per_tok)."""
    cfg = model.config
    return int(cfg.num_hidden_layers), int(cfg.num_experts_per_tok)


class RoutingCapture:
    """Forward hooks keeping the expert ids each MoE layer chose in the last forward while `on`."""

    def __init__(self, model):
        self.routers = moe_routers(model)
        if not self.routers:
            raise ValueError(f"{type(model).__name__} has no MoE layers: there are no routed experts to return")
        self.num_layers, self.top_k = routing_shape(model)
        self.on = False
        self._last: dict[int, torch.Tensor] = {}
        self._handles = [r.register_forward_hook(self._hook(i)) for i, r in self.routers.items()]

    def _hook(self, layer: int):
        def hook(_module, _args, out):
            if self.on:
                self._last[layer] = out[2].detach()
        return hook

    def ids(self, tokens: int) -> torch.Tensor:
        """The last forward's ids as int32 [tokens, num_layers, top_k] on the CPU (the hidden states'
        flattened order: [batch, seq] row-major)."""
        out = torch.zeros(tokens, self.num_layers, self.top_k, dtype=torch.int32)
        for layer, ids in self._last.items():
            out[:, layer] = ids.reshape(tokens, self.top_k).to("cpu", torch.int32)
        self._last = {}
        return out

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


class RoutingReplay:
    """Forward hooks that route by given expert ids while `ids` is set ([tokens, num_layers, top_k],
    the forward's flattened positions; a row of -1 routes that position as the model does). Keep `ids`
    set through the backward: recomputed layers (train.recompute) route again. `stats` counts the
    replayed (position, layer) pairs and those whose expert set the model itself would have chosen
    differently (train/routing_replay_changed_frac)."""

    def __init__(self, model):
        self.routers = moe_routers(model)
        if not self.routers:
            raise ValueError(f"{type(model).__name__} has no MoE layers: routing replay needs a MoE model")
        self.num_layers, self.top_k = routing_shape(model)
        self.ids: torch.Tensor | None = None
        self.replayed = 0.0
        self.changed = 0.0
        self._handles = [r.register_forward_hook(self._hook(i)) for i, r in self.routers.items()]

    def _hook(self, layer: int):
        def hook(module, _args, out):
            if self.ids is None:
                return None
            logits, weights, own = out
            given = self.ids[:, layer].to(own.device, own.dtype)
            if given.shape != own.shape:
                raise ValueError(f"routing replay: {given.shape[0]} replayed positions but the forward routes "
                                 f"{own.shape[0]} (layer {layer})")
            replay = given[:, :1] >= 0
            chosen = torch.where(replay, given, own)
            probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
            w = probs.gather(-1, chosen)
            if getattr(module, "norm_topk_prob", False):
                w = w / w.sum(dim=-1, keepdim=True)
            with torch.no_grad():  # a recomputed layer counts twice in both sums: the share stays
                differs = (own.sort(-1).values != given.sort(-1).values).any(-1) & replay[:, 0]
                self.replayed += float(replay.sum())
                self.changed += float(differs.sum())
            return logits, w.to(weights.dtype), chosen
        return hook

    def take_stats(self) -> tuple[float, float]:
        """(replayed position-layer pairs, pairs whose expert set changed) since the last call."""
        out, self.replayed, self.changed = (self.replayed, self.changed), 0.0, 0.0
        return out

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def packed_ids(routed: list[torch.Tensor], lengths: list[int], num_layers: int, top_k: int) -> torch.Tensor:
    """Per-sample routed experts ([rows, layers, top_k], rows <= length) -> one packed [sum(lengths),
    layers, top_k] tensor, -1 where a sample has no row (its last token: it is never fed to the engine)."""
    out = torch.full((sum(lengths), num_layers, top_k), -1, dtype=torch.long)
    offset = 0
    for ids, n in zip(routed, lengths):
        rows = min(int(ids.shape[0]), n)
        out[offset:offset + rows] = ids[:rows]
        offset += n
    return out
