"""What rlrun's megatron model (rlrun.train.megatron.model) builds differently from the HF implementation of a
family, refused by rlrun validate on the key to change (pure Python: passthrough.check_config runs it).

DeepSeek-V3's router and YaRN rope take values that model.* does not carry (routed_scaling_factor, mscale, ...):
megatron-core reads them from train.megatron (slime passes them as Megatron flags); where the checkpoint's
config.json is on this machine, each must equal the checkpoint's, or the trainer would compute another model."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from rlrun.config.errors import Problem

# megatron-core field <- (where config.json says it, the value when config.json lacks it); megatron-core's default
# where train.megatron lacks it: passthrough.schema()
_HF_OF_FIELD = {
    "moe_router_topk_scaling_factor": (("routed_scaling_factor",), 1.0),
    "mscale": (("rope_scaling", "mscale"), 1.0),
    "mscale_all_dim": (("rope_scaling", "mscale_all_dim"), 0.0),
    "original_max_position_embeddings": (("rope_scaling", "original_max_position_embeddings"), None),
    "beta_fast": (("rope_scaling", "beta_fast"), 32.0),
    "beta_slow": (("rope_scaling", "beta_slow"), 1.0),
}


def _hf_value(hf: dict, path: tuple[str, ...], absent: Any) -> Any:
    node: Any = hf
    for i, key in enumerate(path):
        if key == "rope_scaling":  # transformers >= 5 writes rope_parameters
            node = node.get("rope_scaling") or node.get("rope_parameters") or {}
            continue
        node = node.get(key) if isinstance(node, dict) else None
    return absent if node is None else node


def check(cfg, default: Callable[[str], Any]) -> Iterator[Problem]:
    """default(field): megatron-core's value of a field train.megatron does not set (passthrough.check_config gives
    it from the pinned megatron-core's schema)."""
    m, meg = cfg.model, cfg.train.megatron
    if m.moe is not None and m.moe.router == "sigmoid":
        e = m.moe
        if e.n_group > 1 and e.top_k % e.topk_group == 0 and e.top_k // e.topk_group != 2:
            # HF DeepSeek-V3 ranks a group by the sum of its top-2 scores, megatron-core by its top-(top_k/topk_group)
            yield Problem("model.moe.topk_group", f"megatron-core ranks expert groups by the sum of their top "
                          f"{e.top_k // e.topk_group} scores (top_k / topk_group), HF's DeepSeek-V3 by the top 2",
                          "a model whose top_k is twice its topk_group (DeepSeek-V3: 8 and 4), or n_group=1",
                          {"top_k": e.top_k, "topk_group": e.topk_group})
        elif e.n_group > 1 and e.top_k % e.topk_group:
            yield Problem("model.moe.topk_group", f"top_k {e.top_k} is not a multiple of topk_group {e.topk_group}: "
                          "megatron-core's group-limited routing needs it", "a topk_group that divides top_k",
                          e.topk_group)
        if meg.get("moe_router_enable_expert_bias") is False:
            yield Problem("train.megatron.moe_router_enable_expert_bias", "the sigmoid router's checkpoint bias "
                          "(e_score_correction_bias) picks the experts; without megatron-core's expert bias the "
                          "routing would differ from the checkpoint's", "remove it (rlrun turns it on)", False)
    if m.family != "deepseek_v3":
        return
    hf = _config_json(cfg.checkpoint.hf)
    if hf is None:
        return
    for field, (path, absent) in _HF_OF_FIELD.items():
        if field not in ("moe_router_topk_scaling_factor",) and m.rope_scaling_factor == 1.0:
            continue  # YaRN's fields: read only when the rope is scaled
        theirs = _hf_value(hf, path, absent)
        ours = meg.get(field) if field in meg else default(field)
        ours = 1.0 if field == "moe_router_topk_scaling_factor" and ours is None else ours
        if theirs is not None and (ours is None or abs(float(ours) - float(theirs)) > 1e-9 * max(1.0, abs(theirs))):
            yield Problem(f"train.megatron.{field}", f"{ours!r} (megatron-core's value here) differs from "
                          f"{cfg.checkpoint.hf}/config.json's {'.'.join(path)} ({theirs!r})",
                          f"set train.megatron.{field}={theirs}", {"config": ours, "hf": theirs})


def _config_json(path: str | None) -> dict | None:
    from rlrun.config.hfcheck import read_hf_config
    if path is None or not Path(path).is_dir():
        return None
    return read_hf_config(path)
