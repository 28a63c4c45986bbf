"""LoRA in the megatron backend (model.lora.rank > 0): what rlrun.train.lora does with peft for the torch backend,
on megatron-core's fused, tensor-parallel linear layers (docs/algorithms.md "LoRA").

megatron-core 0.19.2 has no LoRA (Megatron-Bridge's adapters build on Transformer Engine's layers, which the
lent GPUs do not have), so the adapters are written here, small and checked against peft:

* Megatron fuses HF's projections: linear_qkv = [q | k | v] rows interleaved per query group, linear_fc1 =
  [gate | up]; linear_proj = o_proj and linear_fc2 = down_proj are one each. Every *targeted* HF module gets
  its own A (rank x in) and B (out x rank), exactly peft's adapter on that module; the adapter's output lands
  in that module's rows of the fused output, untargeted rows get nothing. So `q_proj + v_proj` trains the q
  and v rows of linear_qkv only, and the merged weight is W + (alpha / rank) B A on those rows alone.
* Tensor parallelism. Column-parallel layers (qkv, fc1: output rows split over TP): A replicated, B split
  like the rows it writes (each slice's B by the rank's query groups / gate and up halves). The low-rank
  activation x A^T enters the TP region through copy_to_tensor_model_parallel_region, so its gradient is
  all-reduced once ([tokens, rank]): A's gradient is the same full gradient on every TP rank, and the input's
  gradient from the adapter is full. Row-parallel layers (proj, fc2: input columns split): A split by columns,
  its partial x A^T reduced over TP (reduce-scattered over the sequence under sequence parallelism), B
  replicated; under sequence parallelism B sees a sequence shard, so it carries megatron-core's
  `sequence_parallel` mark and finalize_model_grads sums its gradient over TP, as for the norms.
* The base weights are frozen (requires_grad False): megatron-core's DDP buckets and its distributed optimizer
  take trainable parameters only, so neither gradients nor fp32 master weights nor Adam moments exist for
  them, and its linear layers switch to linear_with_frozen_weight (no weight-gradient GEMM).
* A starts as peft's kaiming_uniform(a=sqrt(5)) (uniform in +-1/sqrt(in)), drawn on the CPU from run.seed and
  the layer, so every TP layout starts from the same adapter; B starts at 0: step 0 is the base model.
* Engines get merged weights under the HF names through the backend's export (merged_weight); checkpoints
  hold the adapter only, in peft's adapter_model.safetensors format (adapter_state / load_adapter_state).

The functions above the megatron-core section are pure tensor code, tested without megatron-core.
"""
from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable

import torch

from rlrun.config.params import lora_saves
from rlrun.train.megatron.weights import ADAPTER_MODULE, gathered_hf, hf_names, tp_shard, to_megatron

# Megatron linear layer (its name inside a transformer layer) -> how TP splits it and the HF modules it fuses,
# in the order of its rows.
FUSED = {
    "self_attention.linear_qkv": ("column", ("q_proj", "k_proj", "v_proj")),
    "self_attention.linear_proj": ("row", ("o_proj",)),
    "mlp.linear_fc1": ("column", ("gate_proj", "up_proj")),
    "mlp.linear_fc2": ("row", ("down_proj",)),
}
# HF module -> its parent inside a decoder layer (llama / qwen names, peft's target_modules)
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
_LINEAR = re.compile(r"^decoder\.layers\.(\d+)\.(" + "|".join(re.escape(k) for k in FUSED) + r")$")
PEFT_PREFIX = "base_model.model."  # peft's prefix of the wrapped model's names in adapter_model.safetensors


# ---------------------------------------------------------------- pure: names, layouts, merge math
def targets(linear: str, target_modules: Iterable[str]) -> tuple[str, ...]:
    """The HF modules of Megatron linear `linear` (e.g. "self_attention.linear_qkv") that model.lora targets,
    in the fused layer's row order."""
    wanted = set(target_modules)
    return tuple(s for s in FUSED[linear][1] if s in wanted)


def in_features(model, linear: str) -> int:
    """Input width of the (full, un-split) layer: what A multiplies."""
    return {"self_attention.linear_qkv": model.hidden_size, "mlp.linear_fc1": model.hidden_size,
            "self_attention.linear_proj": model.num_attention_heads * model.head_dim,
            "mlp.linear_fc2": model.ffn_hidden_size}[linear]


def row_layout(model, linear: str, tp: int) -> tuple[int, list[int]]:
    """A column-parallel fused layer's rows on one TP rank as (groups, rows per group of each HF module): the
    local rows are, for each of `groups` groups, each module's rows in turn. linear_qkv: the rank's query
    groups, each [q heads | k | v]; linear_fc1: one group [gate | up] (tp_shard splits the halves separately)."""
    if linear == "self_attention.linear_qkv":
        groups = model.num_query_groups
        if groups % tp:
            raise ValueError(f"LoRA on q/k/v needs model.num_query_groups={groups} divisible by parallelism.tp={tp}")
        return groups // tp, [model.num_attention_heads // groups * model.head_dim, model.head_dim, model.head_dim]
    if linear == "mlp.linear_fc1":
        return 1, [model.ffn_hidden_size // tp] * 2
    raise ValueError(f"{linear} is row-parallel: its output rows are not split")


def fuse(parts: list[torch.Tensor | None], per: list[int], groups: int, dim: int) -> torch.Tensor:
    """Interleave per-module tensors into a fused layer's row layout along `dim`: part i holds `groups * per[i]`
    entries along dim (group-major); None = that module is not targeted (zeros). The inverse of reading a
    module's rows out of the fused layout."""
    ref = next(p for p in parts if p is not None)
    dim %= ref.dim()
    chunks = []
    for p, n in zip(parts, per):
        if p is None:
            shape = list(ref.shape)
            shape[dim] = groups * n
            p = ref.new_zeros(shape)
        chunks.append(p.unflatten(dim, (groups, n)))
    return torch.cat(chunks, dim=dim + 1).flatten(dim, dim + 1)


def delta(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """The adapter's weight update scale * B A (fp32), what peft's get_delta_weight computes."""
    return scale * (b.float() @ a.float())


def peft_key(layer: int, module: str, which: str) -> str:
    """peft's name of a LoRA matrix (which = "A" or "B") of HF module `module` in decoder layer `layer`."""
    return f"{PEFT_PREFIX}model.layers.{layer}.{_PARENT[module]}.{module}.lora_{which}.weight"


def saved_modules(model, name: str, layer_offset: int = 0) -> list[str]:
    """HF module names of Megatron parameter `name` (e.g. ["model.embed_tokens"]), which model.lora.modules_to_save
    entries match as peft does (a tied embedding is the output layer too)."""
    mods = [h.rsplit(".", 1)[0] for h in hf_names(model, name, layer_offset)]
    if name == "embedding.word_embeddings.weight" and model.tie_word_embeddings:
        mods.append("lm_head")
    return mods


def is_saved(model, lora, name: str, layer_offset: int = 0) -> bool:
    """Whether model.lora.modules_to_save trains Megatron parameter `name` whole."""
    return any(lora_saves(m, t) for m in saved_modules(model, name, layer_offset) for t in lora.modules_to_save)


def init_a(seed: int, layer: int, module: str, rank: int, fan_in: int) -> torch.Tensor:
    """A of one adapter, full [rank, fan_in] on the CPU: peft's kaiming_uniform_(a=sqrt(5)), i.e. uniform in
    +-1/sqrt(fan_in), from a generator of (run.seed, global layer, module): the same on every TP layout."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + layer * 101 + list(_PARENT).index(module))
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(rank, fan_in, generator=g, dtype=torch.float64) * 2 - 1).mul_(bound).float()


# ---------------------------------------------------------------- megatron-core: the adapter module
class Adapter(torch.nn.Module):
    """The LoRA adapters of one Megatron linear layer (one A, B pair per targeted HF module), this TP rank's
    share. forward(x) = the adapters' contribution to the layer's (local) output."""

    def __init__(self, model, lora, linear: str, layer: int, *, tp_rank: int, tp_size: int, tp_group,
                 sequence_parallel: bool, dtype, device, seed: int):
        super().__init__()
        self.linear, self.style = linear, FUSED[linear][0]
        self.hf_modules = targets(linear, lora.target_modules)
        self.scale = lora.alpha / lora.rank
        self.rank_dim, self.tp_size, self.tp_group, self.sp = lora.rank, tp_size, tp_group, sequence_parallel
        self.dropout = torch.nn.Dropout(lora.dropout) if lora.dropout else torch.nn.Identity()
        fan_in = in_features(model, linear)
        if self.style == "column":
            self.groups, self.per = row_layout(model, linear, tp_size)
            rows = dict(zip(FUSED[linear][1], self.per))
        for module in self.hf_modules:
            a = init_a(seed, layer, module, lora.rank, fan_in)
            if self.style == "column":
                b = torch.zeros(self.groups * rows[module], lora.rank)
            else:  # row-parallel: A split by input columns, B whole
                if fan_in % tp_size:
                    raise ValueError(f"{linear}: input width {fan_in} does not split over parallelism.tp={tp_size}")
                a = a.chunk(tp_size, dim=1)[tp_rank]
                b = torch.zeros(model.hidden_size, lora.rank)
            pa = torch.nn.Parameter(a.to(device=device, dtype=dtype))
            pb = torch.nn.Parameter(b.to(device=device, dtype=dtype))
            _mark(pa, parallel=self.style == "row" and tp_size > 1, dim=1)
            _mark(pb, parallel=self.style == "column" and tp_size > 1, dim=0)
            if self.style == "row" and sequence_parallel:
                pb.sequence_parallel = True  # finalize_model_grads sums its grad over TP (module docstring)
            self.register_parameter(f"A_{module}", pa)
            self.register_parameter(f"B_{module}", pb)

    def a(self, module: str) -> torch.nn.Parameter:
        return getattr(self, f"A_{module}")

    def b(self, module: str) -> torch.nn.Parameter:
        return getattr(self, f"B_{module}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from megatron.core.tensor_parallel import mappings as mp
        r = self.rank_dim
        if self.style == "column":
            if self.sp:  # x is this rank's sequence shard; the adapter's input gradient is full (split back)
                x = mp.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False, group=self.tp_group)
            h = torch.cat([self.dropout(x) @ self.a(m).t() for m in self.hf_modules], dim=-1)
            if self.tp_size > 1:
                h = mp.copy_to_tensor_model_parallel_region(h, group=self.tp_group)
            outs = {m: hs @ self.b(m).t() for hs, m in zip(h.split(r, dim=-1), self.hf_modules)}
            return fuse([outs.get(m) for m in FUSED[self.linear][1]], self.per, self.groups, dim=-1) * self.scale
        (m,) = self.hf_modules
        with _rng_fork(x, self.dropout, self.tp_size):  # each rank's own input columns: the model-parallel RNG
            h = self.dropout(x) @ self.a(m).t()
        if self.sp:
            h = mp.reduce_scatter_to_sequence_parallel_region(h, group=self.tp_group)
        elif self.tp_size > 1:
            h = mp.reduce_from_tensor_model_parallel_region(h, group=self.tp_group)
        return (h @ self.b(m).t()) * self.scale

    @torch.no_grad()
    def merged_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """The layer's local weight with the adapters merged in (W + scale B A), in W's dtype."""
        if self.style == "column":
            parts = {m: delta(self.a(m), self.b(m), self.scale) for m in self.hf_modules}
            d = fuse([parts.get(m) for m in FUSED[self.linear][1]], self.per, self.groups, dim=0)
        else:
            (m,) = self.hf_modules
            d = delta(self.a(m), self.b(m), self.scale)
        return (weight.float() + d).to(weight.dtype)


def _mark(p: torch.nn.Parameter, parallel: bool, dim: int) -> None:
    """megatron-core's TP attributes: a split parameter counts on every rank in the grad norm, a replicated one on
    TP rank 0 only (param_is_not_tensor_parallel_duplicate)."""
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
    set_tensor_model_parallel_attributes(p, is_parallel=parallel, dim=dim, stride=1)


def _rng_fork(x: torch.Tensor, dropout, tp_size: int):
    if isinstance(dropout, torch.nn.Identity) or not dropout.training or tp_size == 1 or not x.is_cuda:
        return contextlib.nullcontext()
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
    return get_cuda_rng_tracker().fork()


def _add_adapter(module, args, kwargs, output):
    """Forward hook of a wrapped linear layer: its (output, bias) with the adapter's output added."""
    out, bias = output
    x = args[0] if args else kwargs["input_"]
    return out + getattr(module, ADAPTER_MODULE)(x).to(out.dtype), bias


def _unwrap(gpt):
    while hasattr(gpt, "module"):
        gpt = gpt.module
    return gpt


def adapters(gpt) -> Iterable[tuple[int, str, Adapter]]:
    """(local layer index, linear name, adapter) of every adapter in `gpt` (DDP wrapper or not)."""
    for name, module in _unwrap(gpt).named_modules():
        m = _LINEAR.match(name)
        if m and hasattr(module, ADAPTER_MODULE):
            yield int(m.group(1)), m.group(2), getattr(module, ADAPTER_MODULE)


def wrap(gpt, model, lora, *, seed: int, layer_offset: int, tp_rank: int, tp_size: int, tp_group,
         sequence_parallel: bool) -> int:
    """Freeze `gpt` (an rlrun megatron GPTModel of this PP stage, weights loaded, before the DDP wraps it), add
    the adapters model.lora asks for and unfreeze the modules in model.lora.modules_to_save. Returns the
    number of trainable parameters on this rank."""
    ref = next(gpt.parameters())
    gpt.requires_grad_(False)
    for name, module in list(gpt.named_modules()):
        m = _LINEAR.match(name)
        if not m or not targets(m.group(2), lora.target_modules):
            continue
        adapter = Adapter(model, lora, m.group(2), int(m.group(1)) + layer_offset, tp_rank=tp_rank, tp_size=tp_size,
                          tp_group=tp_group, sequence_parallel=sequence_parallel, dtype=ref.dtype, device=ref.device,
                          seed=seed)
        module.add_module(ADAPTER_MODULE, adapter)
        if not hasattr(module, "post_norm"):  # PostNormRowParallelLinear adds it before its norm itself
            module.register_forward_hook(_add_adapter, with_kwargs=True)
    for name, p in gpt.named_parameters():
        if f".{ADAPTER_MODULE}." not in name and is_saved(model, lora, name, layer_offset):
            p.requires_grad_(True)
    return sum(p.numel() for p in gpt.parameters() if p.requires_grad)


def merger(gpt):
    """weight(name, param) for weights.export_hf: a wrapped layer's weight with its adapter merged in."""
    by_weight = {f"decoder.layers.{i}.{linear}.weight": a for i, linear, a in adapters(gpt)}

    def weight(name: str, p: torch.nn.Parameter) -> torch.Tensor:
        a = by_weight.get(name)
        return p.detach() if a is None else a.merged_weight(p.detach())
    return weight


def _tp():
    from megatron.core import parallel_state as ps
    return ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size(), \
        ps.get_tensor_model_parallel_group()


def _gather(t: torch.Tensor, dim: int, size: int, group) -> torch.Tensor:
    """The full tensor of TP shards split along `dim` (a copy: the caller keeps it past the next step)."""
    if size == 1:
        return t.clone()
    shards = [torch.empty_like(t) for _ in range(size)]
    torch.distributed.all_gather(shards, t.contiguous(), group=group)
    return torch.cat(shards, dim=dim)


@torch.no_grad()
def adapter_state(gpt, model, lora, layer_offset: int = 0) -> dict[str, torch.Tensor]:
    """This PP stage's adapter in peft's adapter_model.safetensors names, full (TP-gathered) tensors, and the
    modules model.lora.modules_to_save trains (peft saves a tied embedding as lm_head too). Collective over TP."""
    _, size, group = _tp()
    out: dict[str, torch.Tensor] = {}
    for i, linear, a in adapters(gpt):
        for m in a.hf_modules:
            out[peft_key(i + layer_offset, m, "A")] = _gather(a.a(m).detach(), 1, size, group) \
                if a.style == "row" else a.a(m).detach().clone()
            out[peft_key(i + layer_offset, m, "B")] = _gather(a.b(m).detach(), 0, size, group) \
                if a.style == "column" else a.b(m).detach().clone()
    for name, p in _unwrap(gpt).named_parameters():
        if p.requires_grad and f".{ADAPTER_MODULE}." not in name:
            for hf, t in gathered_hf(model, name, p.detach(), layer_offset):
                out[PEFT_PREFIX + hf] = t.clone()  # a copy, as the adapters above
                if hf == "model.embed_tokens.weight" and model.tie_word_embeddings:
                    out[PEFT_PREFIX + "lm_head.weight"] = t.clone()
    return out


@torch.no_grad()
def load_adapter_state(gpt, model, lora, state: dict[str, torch.Tensor], layer_offset: int = 0) -> None:
    """adapter_state's inverse on this rank (each tensor split as this rank holds it); raises when `state` does
    not hold exactly this stage's adapter and saved modules (another model.lora)."""
    rank, size, _ = _tp()
    used = set()

    def get(key):
        if key not in state:
            raise RuntimeError(f"the saved adapter lacks {key}: it was saved with another model.lora")
        used.add(key)
        return state[key]

    for i, linear, a in adapters(gpt):
        for m in a.hf_modules:
            wa, wb = get(peft_key(i + layer_offset, m, "A")), get(peft_key(i + layer_offset, m, "B"))
            a.a(m).copy_(wa.chunk(size, dim=1)[rank] if a.style == "row" else wa)
            a.b(m).copy_(wb.chunk(size, dim=0)[rank] if a.style == "column" else wb)
    for name, p in _unwrap(gpt).named_parameters():
        if p.requires_grad and f".{ADAPTER_MODULE}." not in name:
            names = hf_names(model, name, layer_offset)
            p.copy_(tp_shard(name, to_megatron(model, name, [get(PEFT_PREFIX + h) for h in names]), rank, size))
    if model.tie_word_embeddings:
        used.add(PEFT_PREFIX + "lm_head.weight")  # peft's copy of the tied embedding
    stray = [k for k in state if k not in used]
    if stray:
        raise RuntimeError(f"the saved adapter has {stray[:4]}, which model.lora does not train here: it was saved "
                           "with another model.lora")
