"""Check model.* against the HF checkpoint's config.json: every architecture field (slime checks a few
and skips vocab, head dim, KV groups, qk-norm, swiglu). Reads JSON only; a checkpoint that is not on
this machine (planning off-cluster) is noted in the plan, not an error."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from rlrun.config.errors import Problem
from rlrun.config.families import BY_MODEL_TYPE, FAMILIES
from rlrun.config.kinds import BACKENDS, builds
from rlrun.config.registry import RULES as rule
from rlrun.config.schema import RunConfig


def _family(j: dict):
    return FAMILIES.get(BY_MODEL_TYPE.get(j.get("model_type"), ""))


def _hardwired(key: str, hf_key: str | Callable[[dict], Any], absent: Any) -> Callable[[dict], Any]:
    """A field the family's modeling code fixes (FAMILIES[...].fixed) wins; else config.json's hf_key, and
    `absent` when the file lacks it (transformers' default)."""
    def get(j: dict) -> Any:
        fam = _family(j)
        if fam is not None and key in fam.fixed:
            return fam.fixed[key]
        return hf_key(j) if callable(hf_key) else bool(j.get(hf_key, absent))
    return get


def _rope(j: dict, key: str, default: Any = None) -> Any:
    """transformers >= 5 writes rope settings under rope_parameters; hub files keep them top-level/rope_scaling."""
    for src in (j, j.get("rope_parameters") or {}, j.get("rope_scaling") or {}):
        if isinstance(src, dict) and src.get(key) is not None:
            return src[key]
    return default


def _scaling_factor(j: dict) -> float:
    for src in (j.get("rope_scaling"), j.get("rope_parameters")):
        if isinstance(src, dict) and src.get("rope_type", src.get("type", "default")) != "default":
            return float(src.get("factor", 1.0))
    return 1.0


def _head_dim(j: dict) -> int:
    if j.get("model_type") == "deepseek_v3":
        return j.get("v_head_dim")
    return j.get("head_dim") or j["hidden_size"] // j["num_attention_heads"]


def _moe(key: str) -> Callable[[dict], Any]:
    hf_keys = {"num_experts": ("num_experts", "n_routed_experts"), "top_k": ("num_experts_per_tok",),
               "expert_ffn_hidden_size": ("moe_intermediate_size",), "first_k_dense": ("first_k_dense_replace",),
               "n_group": ("n_group",), "topk_group": ("topk_group",)}[key]
    defaults = {"first_k_dense": 0, "n_group": 1, "topk_group": 1}
    return lambda j: next((j[k] for k in hf_keys if j.get(k) is not None), defaults.get(key))


# rlrun field (under model.) -> how config.json says it
FIELDS: dict[str, Callable[[dict], Any]] = {
    "family": lambda j: BY_MODEL_TYPE.get(j.get("model_type"), j.get("model_type")),
    "vocab_size": lambda j: j.get("vocab_size"),
    "hidden_size": lambda j: j.get("hidden_size"),
    "ffn_hidden_size": lambda j: j.get("intermediate_size"),
    "num_layers": lambda j: j.get("num_hidden_layers"),
    "num_attention_heads": lambda j: j.get("num_attention_heads"),
    "num_query_groups": lambda j: j.get("num_key_value_heads", j.get("num_attention_heads")),
    "head_dim": _head_dim,
    "rotary_base": lambda j: _rope(j, "rope_theta", 10000.0),
    "rotary_percent": lambda j: _rope(j, "partial_rotary_factor", 1.0),
    "rope_scaling_factor": _scaling_factor,
    "max_position_embeddings": lambda j: j.get("max_position_embeddings"),
    "norm_epsilon": lambda j: j.get("rms_norm_eps"),
    "tie_word_embeddings": lambda j: bool(j.get("tie_word_embeddings", False)),
    "qk_layernorm": _hardwired("qk_layernorm", lambda j: j.get("q_lora_rank") is not None, False),
    "add_qkv_bias": _hardwired("add_qkv_bias", "attention_bias", False),
    "swiglu": lambda j: j.get("hidden_act", "silu") == "silu",
    "moe.num_experts": _moe("num_experts"),
    "moe.top_k": _moe("top_k"),
    "moe.expert_ffn_hidden_size": _moe("expert_ffn_hidden_size"),
    "moe.first_k_dense": _moe("first_k_dense"),
    "moe.n_group": _moe("n_group"),
    "moe.topk_group": _moe("topk_group"),
    "moe.shared_expert_ffn_hidden_size": lambda j: (j.get("n_shared_experts") or 0) * (j.get("moe_intermediate_size") or 0),
    "mla.q_lora_rank": lambda j: j.get("q_lora_rank"),
    "mla.kv_lora_rank": lambda j: j.get("kv_lora_rank"),
    "mla.qk_rope_head_dim": lambda j: j.get("qk_rope_head_dim"),
    "mla.qk_nope_head_dim": lambda j: j.get("qk_nope_head_dim"),
    "mla.v_head_dim": lambda j: j.get("v_head_dim"),
    # DeepSeek-V3, GLM-4.x-MoE and MiMo name them so; a checkpoint without the key has none
    "mtp_num_layers": lambda j: j.get("num_nextn_predict_layers") or 0,
}


# Fields where the config may use less than the checkpoint has: a training max_position_embeddings below
# config.json's only leaves the positions beyond it unused (slime trains with --seq-length / context
# lengths below the checkpoint's; the weights do not depend on it). Above it is refused.
AT_MOST = {"max_position_embeddings", "mtp_num_layers"}  # MTP: fewer leaves the checkpoint's others unloaded


_UNUSED = {"max_position_embeddings": "positions", "mtp_num_layers": "the checkpoint's other MTP layers"}


def read_hf_config(path: str) -> Optional[dict]:
    f = Path(path) / "config.json"
    return json.loads(f.read_text()) if f.is_file() else None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return b is not None and a is not None and math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def compare(cfg: RunConfig, hf: dict, source: str) -> Iterator[Problem]:
    model = cfg.model.model_dump()
    for field, getter in FIELDS.items():
        section, _, leaf = field.rpartition(".")
        holder = model.get(section) if section else model
        if holder is None:  # dense model: no moe.*; non-MLA: no mla.*
            continue
        ours, theirs = holder[leaf], getter(hf)
        if theirs is None and section:
            continue
        if field in AT_MOST and theirs is not None and ours <= theirs:
            continue
        if not _same(ours, theirs):
            more = f" (at most {theirs!r}: a smaller value only leaves {_UNUSED.get(field, 'them')} unused)" \
                if field in AT_MOST else ""
            yield Problem(f"model.{field}", f"{ours!r} differs from {source} ({theirs!r}){more}",
                          f"set model.{field}={json.dumps(theirs)} or pick the model profile that matches "
                          "the checkpoint", {"config": ours, "hf": theirs})


@rule
def hf_architecture(cfg: RunConfig) -> Iterator[Problem]:
    path = cfg.checkpoint.hf
    if path is None or not Path(path).exists():
        return
    hf = read_hf_config(path)
    if hf is None:
        yield Problem("checkpoint.hf", f"{path} has no config.json", "point checkpoint.hf at a Hugging Face "
                      "model dir (config.json + *.safetensors + tokenizer files)", path)
        return
    yield from compare(cfg, hf, f"{path}/config.json")
    window = hf.get("sliding_window") if hf.get("use_sliding_window", True) is not False else None
    if not BACKENDS[cfg.train.backend].sliding_window and window is not None and window < cfg.rollout.context_length:
        yield Problem("checkpoint.hf", f"{path}/config.json has sliding-window attention ({window} tokens), which "
                      f"rlrun's {cfg.train.backend} layers do not implement, and rollout.context_length is "
                      f"{cfg.rollout.context_length}: training would attend further back than the engines",
                      f"set rollout.context_length<={window}, or train.backend=torch", window)


@rule
def random_init(cfg: RunConfig) -> Iterator[Problem]:
    """checkpoint.random_init asks for random weights: a checkpoint.hf as well is a contradiction."""
    if cfg.checkpoint.random_init and cfg.checkpoint.hf is not None:
        yield Problem("checkpoint.random_init", f"is true, but checkpoint.hf is set ({cfg.checkpoint.hf}): the run "
                      "cannot start from both", "set checkpoint.random_init=false to load checkpoint.hf, or "
                      "checkpoint.hf=null for random weights", True)


@rule
def model_family(cfg: RunConfig) -> Iterator[Problem]:
    """The family's hard-wired architecture (FAMILIES[...].fixed) and the backends that build it."""
    m, fam = cfg.model, FAMILIES[cfg.model.family]
    for key, value in fam.fixed.items():
        if getattr(m, key) != value:
            yield Problem(f"model.{key}", f"family {m.family} builds {key}={value} (its modeling code fixes it), "
                          f"got {getattr(m, key)}", f"set model.{key}={json.dumps(value)}", getattr(m, key))
    if not builds(cfg.train.backend, m.family, fam.backends):
        spec = BACKENDS[fam.backends[0]]
        gpu = " and hardware=h100 (or other GPU hardware)" if spec.needs_gpu and cfg.hardware.vendor == "cpu" else ""
        yield Problem("train.backend", f"the {cfg.train.backend} backend does not build family {m.family} "
                      f"(built by: {', '.join(fam.backends)})",
                      f"set train.backend={fam.backends[0]}{gpu}" + (" (data parallel: parallelism=tp1, "
                                                                     "rollout.gpus_per_engine=1)"
                                                                     if not spec.model_parallel else ""),
                      cfg.train.backend)


def hf_note(cfg: RunConfig) -> Optional[str]:
    path = cfg.checkpoint.hf
    if path is not None and not Path(path).exists():
        return f"checkpoint.hf {path} is not on this machine: model.* not checked against its config.json"
    return None
