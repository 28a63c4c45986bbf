"""Hugging Face <-> Megatron parameter mapping for Qwen3, Llama 3.x, GLM-4, Qwen3-MoE and DeepSeek-V3 (MLA), with the
multi-token prediction layers of DeepSeek-V3-style and MiMo checkpoints (model.mtp_num_layers).

Written here rather than taken from mbridge: mbridge 0.15.1 builds its models with the Transformer
Engine layer spec only (its names, e.g. `linear_qkv.layer_norm_weight`, are TE's fused-norm names)
and has no dense GLM-4 bridge; docs/megatron.md has the evaluation.

Three layers, each a pure function of tensors so it is testable without megatron-core or a GPU:
1. name and layout: one Megatron parameter (full, un-sharded) <-> its HF tensors
   (qkv interleaved by query group; gate/up fused into linear_fc1);
2. TP: the shard of a full tensor on one TP rank, and the full tensor from all shards;
3. streaming: walk a model's local parameters, gather TP shards, yield HF-named tensors in
   buckets of at most `bucket_bytes` (weight sync and HF export never hold the whole model twice).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import torch

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
# megatron-core's MTP block: mtp.layers.{i}.{enorm, hnorm, eh_proj, final_layernorm} and its transformer layer
# (`transformer_layer` in megatron-core 0.16, `mtp_model_layer` in 0.19)
_MTP = re.compile(r"^mtp\.layers\.(\d+)\.(.+)$")
_MTP_LAYER = ("transformer_layer.", "mtp_model_layer.")
# HF names of the MTP layers' own tensors by rlrun.config.families.Family.mtp_names (facts from slime's converters,
# slime/backends/megatron_utils/megatron_to_hf/deepseekv3.py and mimo.py): "nextn" (DeepSeek-V3, GLM-4.x-MoE) keeps
# them as decoder layer num_layers + i, "mimo" as model.mtp_layers.{i}
_MTP_OWN = {
    "nextn": {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "eh_proj.weight": "eh_proj.weight",
              "final_layernorm.weight": "shared_head.norm.weight"},
    "mimo": {"enorm.weight": "token_layernorm.weight", "hnorm.weight": "hidden_layernorm.weight",
             "eh_proj.weight": "input_proj.weight", "final_layernorm.weight": "final_layernorm.weight"},
}
# model.lora: rlrun.train.megatron.lora attaches each linear layer's adapter as a submodule of this name; its
# parameters are no HF weights (the export merges them into the layer's weight)
ADAPTER_MODULE = "lora_adapter"
# MoE layers (megatron-core's SequentialMLP: experts are not TP-split, EP holds a slice of them)
_EXPERT = re.compile(r"^mlp\.experts\.local_experts\.(\d+)\.(linear_fc1|linear_fc2)\.weight$")

# Megatron per-layer suffix -> HF per-layer suffix, for the 1:1 tensors.
_ONE_TO_ONE = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "self_attention.linear_proj.post_norm.weight": "post_self_attn_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
    "mlp.linear_fc2.post_norm.weight": "post_mlp_layernorm.weight",
    # DeepSeek-V3: shared experts (megatron-core's SharedExpertMLP, TP-split like a dense MLP) and the router's
    # score-correction bias (megatron-core's expert_bias buffer, fp32 as in the checkpoint)
    "mlp.shared_experts.linear_fc2.weight": "mlp.shared_experts.down_proj.weight",
    "mlp.router.expert_bias": "mlp.gate.e_score_correction_bias",
}
# Multi-latent attention (model.mla; megatron-core's MLASelfAttention in its local spec): one HF tensor each, the
# same layout (q_b_proj and kv_b_proj rows per head [nope | rope] and [k nope | v]; kv_a_proj_with_mqa [latent | rope])
_MLA = {
    "self_attention.linear_q_proj.weight": "self_attn.q_proj.weight",            # q_lora_rank null
    "self_attention.linear_q_down_proj.weight": "self_attn.q_a_proj.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_a_layernorm.weight",
    "self_attention.linear_q_up_proj.weight": "self_attn.q_b_proj.weight",
    "self_attention.linear_kv_down_proj.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "self_attention.kv_layernorm.weight": "self_attn.kv_a_layernorm.weight",
    "self_attention.linear_kv_up_proj.weight": "self_attn.kv_b_proj.weight",
}
# Megatron buffers that are HF weights (named_parameters misses them)
_BUFFERS = ("mlp.router.expert_bias",)
_GLOBAL = {
    "embedding.word_embeddings.weight": "model.embed_tokens.weight",
    "decoder.final_layernorm.weight": "model.norm.weight",
    "output_layer.weight": "lm_head.weight",
}
# Column-parallel (split along output rows) and row-parallel (split along input columns) params.
# MLA's down projections are megatron-core's column-parallel linears too (their outputs gathered over TP).
_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias", "mlp.linear_fc1.weight",
           "mlp.shared_experts.linear_fc1.weight", "embedding.word_embeddings.weight", "output_layer.weight",
           "eh_proj.weight",  # MTP: megatron-core's column-parallel linear (output rows split over TP)
           *(k for k in _MLA if "linear" in k))
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight", "mlp.shared_experts.linear_fc2.weight")
# [gate; up] fused linear_fc1: each TP rank holds [gate_r; up_r]
_GATE_UP = ("mlp.linear_fc1.weight", "mlp.shared_experts.linear_fc1.weight")


# ---------------------------------------------------------------- 1. names and layouts
def interleave_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
    """HF q/k/v (weight [rows, hidden] or bias [rows]) -> Megatron linear_qkv rows, grouped per
    query group as [q heads of group g | k_g | v_g] for g in groups."""
    tail = q.shape[1:]
    q, k, v = (x.reshape(groups, -1, *tail) for x in (q, k, v))
    return torch.cat([q, k, v], dim=1).reshape(-1, *tail)


def split_qkv(qkv: torch.Tensor, groups: int, heads: int, head_dim: int):
    """Inverse of interleave_qkv: Megatron linear_qkv -> (q, k, v) in HF layout."""
    tail = qkv.shape[1:]
    per_group = heads // groups * head_dim
    g = qkv.reshape(groups, per_group + 2 * head_dim, *tail)
    q, k, v = g.split([per_group, head_dim, head_dim], dim=1)
    return tuple(x.reshape(-1, *tail) for x in (q, k, v))


def hf_names(model, name: str, layer_offset: int = 0, expert_offset: int = 0) -> list[str]:
    """HF tensor names that make up Megatron parameter `name` (local layer index + layer_offset,
    local expert index + expert_offset: this EP rank's first global expert)."""
    if name in _GLOBAL:
        return [_GLOBAL[name]]
    mtp = _MTP.match(name)
    if mtp:
        return _mtp_names(model, int(mtp.group(1)), mtp.group(2), expert_offset)
    m = _LAYER.match(name)
    if not m:
        raise KeyError(f"no HF mapping for Megatron parameter {name!r}")
    names = _layer_names(model, int(m.group(1)) + layer_offset, m.group(2), expert_offset)
    if names is None:
        raise KeyError(f"no HF mapping for Megatron parameter {name!r} (family {model.family})")
    return names


def _mtp_names(model, i: int, suffix: str, expert_offset: int) -> list[str]:
    """HF names of MTP layer i's parameter `suffix` (the MTP layers are always whole on the last stage: no offset)."""
    from rlrun.config.families import FAMILIES
    style = FAMILIES[model.family].mtp_names
    if style is None:
        raise KeyError(f"family {model.family} has no HF names for MTP layers (model.mtp_num_layers)")
    pre = f"model.layers.{model.num_layers + i}." if style == "nextn" else f"model.mtp_layers.{i}."
    if suffix in _MTP_OWN[style]:
        return [pre + _MTP_OWN[style][suffix]]
    inner = next((suffix[len(p):] for p in _MTP_LAYER if suffix.startswith(p)), None)
    names = None if inner is None else _layer_names(model, model.num_layers + i, inner, expert_offset)
    if names is None:
        raise KeyError(f"no HF mapping for Megatron parameter 'mtp.layers.{i}.{suffix}' (family {model.family})")
    return names if style == "nextn" else [pre + n.split(".", 3)[3] for n in names]


def _is_mimo_eh_proj(model, name: str) -> bool:
    """MiMo's input_proj reads [hidden | token embedding], megatron-core's eh_proj [embedding | hidden]: the two
    column halves swap (an involution, the same both ways)."""
    from rlrun.config.families import FAMILIES
    return _MTP.match(name) is not None and name.endswith(".eh_proj.weight") and \
        FAMILIES[model.family].mtp_names == "mimo"


def _layer_names(model, layer: int, suffix: str, expert_offset: int) -> list[str] | None:
    """HF names of decoder layer `layer`'s parameter `suffix`; None: it has none."""
    pre = f"model.layers.{layer}."
    if getattr(model, "mla", None) is not None and suffix in _MLA:
        return [pre + _MLA[suffix]]
    if suffix in _ONE_TO_ONE:
        return [pre + _ONE_TO_ONE[suffix]]
    if suffix == "mlp.router.weight":
        return [pre + "mlp.gate.weight"]
    expert = _EXPERT.match(suffix)
    if expert:
        e = f"{pre}mlp.experts.{int(expert.group(1)) + expert_offset}."
        return [e + "gate_proj.weight", e + "up_proj.weight"] if expert.group(2) == "linear_fc1" else \
            [e + "down_proj.weight"]
    if suffix.startswith("self_attention.linear_qkv."):
        kind = suffix.rsplit(".", 1)[1]
        return [f"{pre}self_attn.{p}_proj.{kind}" for p in "qkv"]
    if suffix == "mlp.shared_experts.linear_fc1.weight":
        return [pre + "mlp.shared_experts.gate_proj.weight", pre + "mlp.shared_experts.up_proj.weight"]
    if suffix == "mlp.linear_fc1.weight":
        # GLM-4 stores gate and up fused already, in the same [gate; up] order as Megatron.
        return [pre + "mlp.gate_up_proj.weight"] if model.family == "glm4" else \
            [pre + "mlp.gate_proj.weight", pre + "mlp.up_proj.weight"]
    return None


def to_megatron(model, name: str, hf: list[torch.Tensor]) -> torch.Tensor:
    """Full Megatron tensor from its HF tensors (in hf_names order)."""
    if ".linear_qkv." in name:
        return interleave_qkv(*hf, groups=model.num_query_groups)
    if _is_mimo_eh_proj(model, name):
        return _swap_halves(hf[0])
    return hf[0] if len(hf) == 1 else torch.cat(hf, dim=0)


def _swap_halves(w: torch.Tensor) -> torch.Tensor:
    first, second = w.chunk(2, dim=1)
    return torch.cat([second, first], dim=1)


def to_hf(model, name: str, full: torch.Tensor, layer_offset: int = 0, expert_offset: int = 0
          ) -> list[tuple[str, torch.Tensor]]:
    """HF (name, tensor) pairs from one full Megatron tensor."""
    names = hf_names(model, name, layer_offset, expert_offset)
    if ".linear_qkv." in name:
        parts = split_qkv(full, model.num_query_groups, model.num_attention_heads, model.head_dim)
    elif len(names) == 2:  # gate_proj, up_proj
        parts = full.chunk(2, dim=0)
    elif _is_mimo_eh_proj(model, name):
        parts = (_swap_halves(full),)
    else:
        parts = (full,)
    return list(zip(names, parts))


# ---------------------------------------------------------------- 2. tensor parallelism
def _split_dim(name: str) -> int | None:
    if name.endswith(_COLUMN):
        return 0
    if name.endswith(_ROW):
        return 1
    return None


def tp_shard(name: str, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """This TP rank's slice of a full Megatron tensor (norms and other replicated params whole).

    linear_fc1 is [gate; up]: each rank holds [gate_r; up_r], so the two halves split separately.
    linear_qkv splits as plain row chunks: groups are contiguous, and megatron-core gathers and
    re-slices itself when TP exceeds the number of query groups."""
    dim = _split_dim(name)
    if dim is None or size == 1:
        return full
    if name.endswith(_GATE_UP):
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(size, 0)[rank], up.chunk(size, 0)[rank]], dim=0)
    if full.shape[dim] % size:
        raise ValueError(f"{name}: dim {dim} of size {full.shape[dim]} does not split over TP={size}")
    return full.chunk(size, dim=dim)[rank]


def tp_unshard(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    """Inverse of tp_shard over all ranks' shards (in TP-rank order)."""
    dim = _split_dim(name)
    if dim is None or len(shards) == 1:
        return shards[0]
    if name.endswith(_GATE_UP):
        halves = [s.chunk(2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(shards, dim=dim)


# ---------------------------------------------------------------- 3. whole models
def _local_params(gpt) -> Iterator[tuple[str, torch.Tensor]]:
    """Named parameters of a GPTModel, unwrapped from DDP/Float16 wrappers ('module.' prefixes), and the buffers
    that are HF weights (_BUFFERS: the MoE router's expert_bias); LoRA adapters (model.lora) left out: they have no
    HF tensor of their own."""
    while hasattr(gpt, "module"):
        gpt = gpt.module
    for name, p in gpt.named_parameters():
        if f".{ADAPTER_MODULE}." not in name:
            yield name, p
    for name, b in gpt.named_buffers():
        if b is not None and name.endswith(_BUFFERS):
            yield name, b


def hf_tensor_count(gpt) -> int:
    """The number of local tensors load_hf fills (parameters and the _BUFFERS)."""
    return sum(1 for _ in _local_params(gpt))


def _tp():
    from megatron.core import parallel_state as ps
    return ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size(), \
        ps.get_tensor_model_parallel_group()


def is_expert(name: str) -> bool:
    return ".mlp.experts.local_experts." in name


def _ep(model):
    """(EP rank, EP size, EP group, experts per EP rank); (0, 1, None, 0) for dense models."""
    if model.moe is None:
        return 0, 1, None, 0
    from megatron.core import parallel_state as ps
    size = ps.get_expert_model_parallel_world_size()
    return ps.get_expert_model_parallel_rank(), size, ps.get_expert_model_parallel_group(), model.moe.num_experts // size


@torch.no_grad()
def load_hf(gpt, model, get: Callable[[str], torch.Tensor], layer_offset: int = 0) -> int:
    """Copy HF weights (fetched one by one through `get(hf_name)`) into this rank's shards of
    `gpt`. Returns the number of parameters loaded; every local parameter must be covered."""
    rank, size, _ = _tp()
    ep_rank, _, _, per_ep = _ep(model)
    n = 0
    for name, p in _local_params(gpt):
        names = hf_names(model, name, layer_offset, ep_rank * per_ep if is_expert(name) else 0)
        if name == "output_layer.weight" and model.tie_word_embeddings:
            names = [_GLOBAL["embedding.word_embeddings.weight"]]  # last PP stage's copy of the tied weight
        full = to_megatron(model, name, [get(h) for h in names])
        shard = tp_shard(name, full, rank, size)
        if shard.shape != p.shape:
            raise ValueError(f"{name}: HF {names} give shard {tuple(shard.shape)} on TP rank {rank}/{size}, "
                             f"model expects {tuple(p.shape)}: model.* does not match the checkpoint")
        p.copy_(shard.to(device=p.device, dtype=p.dtype))
        n += 1
    return n


def gathered_hf(model, name: str, t: torch.Tensor, layer_offset: int = 0) -> list[tuple[str, torch.Tensor]]:
    """HF (name, tensor) pairs of this rank's local Megatron tensor `t` of parameter `name`, TP-gathered (and
    EP-gathered for experts). Collective over the TP (EP) group: every rank of it must call it for `name`."""
    rank, size, group = _tp()
    _, ep_size, ep_group, per_ep = _ep(model)
    if _split_dim(name) is not None and size > 1:
        shards = [torch.empty_like(t) for _ in range(size)]
        torch.distributed.all_gather(shards, t.contiguous(), group=group)
        t = tp_unshard(name, shards)
    if is_expert(name):  # local expert i of every EP rank r is global expert r * per_ep + i
        parts = [t]
        if ep_size > 1:
            parts = [torch.empty_like(t) for _ in range(ep_size)]
            torch.distributed.all_gather(parts, t.contiguous(), group=ep_group)
        return [kv for r, x in enumerate(parts) for kv in to_hf(model, name, x, layer_offset, r * per_ep)]
    return to_hf(model, name, t, layer_offset)


@torch.no_grad()
def export_hf(gpt, model, bucket_bytes: int, layer_offset: int = 0, dtype=None,
              weight: Callable[[str, torch.nn.Parameter], torch.Tensor] | None = None
              ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Yield this PP stage's weights with HF names, TP-gathered, in buckets of <= bucket_bytes
    (one oversize tensor makes its own bucket). Collective over the TP group: every TP rank must
    iterate it; all of them receive the same full tensors (on the GPU). weight(name, param): the local
    tensor to export for a parameter (model.lora: the weight with its adapter merged in); default its data."""
    bucket, used = [], 0
    inner = gpt
    while hasattr(inner, "module"):
        inner = inner.module
    for name, p in _local_params(gpt):
        if name == "output_layer.weight" and model.tie_word_embeddings:
            continue  # HF keeps a tied lm_head as embed_tokens only
        if name == "embedding.word_embeddings.weight" and not getattr(inner, "pre_process", True):
            continue  # the MTP stage's copy of the first stage's embedding (model.mtp_num_layers with PP > 1)
        t = p.detach() if weight is None else weight(name, p)
        for hf_name, x in gathered_hf(model, name, t, layer_offset):
            # a buffer keeps its dtype (the fp32 expert bias: rounded to bf16 it would pick other experts)
            x = x if dtype is None or name.endswith(_BUFFERS) else x.to(dtype)
            nbytes = x.numel() * x.element_size()
            if bucket and used + nbytes > bucket_bytes:
                yield bucket
                bucket, used = [], 0
            bucket.append((hf_name, x.contiguous()))
            used += nbytes
    if bucket:
        yield bucket
