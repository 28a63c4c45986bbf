"""`train.megatron`: megatron-core's own config fields, passed through unchanged (pure Python; no megatron).

The fields of the pinned megatron-core's TransformerConfig (with ModelParallelConfig), MLATransformerConfig,
OptimizerConfig and DistributedDataParallelConfig, with their types and choices, and Megatron-LM's
command-line flag for each, are read from the wheel's source by tools/megatron_schema.py into
megatron_config.json next to this file. `rlrun validate` checks a `train.megatron` mapping against it
(check_megatron_mapping: unknown name -> did-you-mean, wrong type or choice -> the allowed values); the
megatron backend hands each value to the dataclass that has the field (kwargs_for); `rlrun import slime`
fills it from the Megatron flag of the same name (resolve_flag).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlrun.config.errors import Problem, did_you_mean

SCHEMA_JSON = Path(__file__).with_name("megatron_config.json")
CLASSES = ("TransformerConfig", "MLATransformerConfig", "OptimizerConfig", "DistributedDataParallelConfig")

# Fields rlrun sets from its typed config: one source of truth per value (as rollout.sglang's TYPED_FIELDS).
TYPED_FIELDS = {
    "num_layers": "model.num_layers", "hidden_size": "model.hidden_size", "ffn_hidden_size": "model.ffn_hidden_size",
    "num_attention_heads": "model.num_attention_heads", "num_query_groups": "model.num_query_groups",
    "kv_channels": "model.head_dim", "layernorm_epsilon": "model.norm_epsilon", "add_qkv_bias": "model.add_qkv_bias",
    "qk_layernorm": "model.qk_layernorm", "rotary_interleaved": "model.family",
    "gated_linear_unit": "model.swiglu", "activation_func": "model.swiglu", "normalization": "model.family",
    "add_bias_linear": "model.family", "num_moe_experts": "model.moe.num_experts", "moe_router_topk": "model.moe.top_k",
    "moe_ffn_hidden_size": "model.moe.expert_ffn_hidden_size",
    "moe_shared_expert_intermediate_size": "model.moe.shared_expert_ffn_hidden_size",
    "moe_router_score_function": "model.moe.router", "moe_router_num_groups": "model.moe.n_group",
    "moe_router_group_topk": "model.moe.topk_group", "multi_latent_attention": "model.mla",
    "mtp_num_layers": "model.mtp_num_layers", "mtp_loss_scaling_factor": "train.mtp.loss_scaling_factor",
    "q_lora_rank": "model.mla.q_lora_rank", "kv_lora_rank": "model.mla.kv_lora_rank",
    "qk_head_dim": "model.mla.qk_nope_head_dim", "qk_pos_emb_head_dim": "model.mla.qk_rope_head_dim",
    "v_head_dim": "model.mla.v_head_dim", "rope_type": "model.rope_scaling_factor (1: rope, else yarn)",
    "rotary_scaling_factor": "model.rope_scaling_factor", "rotary_base": "model.rotary_base",
    "rotary_percent": "model.rotary_percent",
    "tensor_model_parallel_size": "parallelism.tp",
    "expert_tensor_parallel_size": "(rlrun runs experts whole on each rank: ETP 1, as slime's scripts)", "pipeline_model_parallel_size": "parallelism.pp",
    "context_parallel_size": "parallelism.cp", "expert_model_parallel_size": "parallelism.ep",
    "sequence_parallel": "parallelism.sequence_parallel",
    "recompute_granularity": "train.recompute.granularity", "recompute_method": "train.recompute.method",
    "recompute_num_layers": "train.recompute.num_layers",
    "gradient_accumulation_fusion": "train.gradient_accumulation_fusion",
    "calculate_per_token_loss": "train.calculate_per_token_loss", "grad_reduce_in_fp32": "train.fp32_grads",
    "variable_seq_lengths": "parallelism.pp (rlrun packs variable-length micro-batches)",
    "bf16": "(rlrun trains in bf16)", "fp16": "(rlrun trains in bf16)", "params_dtype": "(rlrun trains in bf16)",
    "use_distributed_optimizer": "(rlrun always uses the distributed optimizer, as slime)",
    "optimizer": "optim.optimizer", "lr": "optim.lr", "min_lr": "optim.min_lr", "weight_decay": "optim.weight_decay",
    "adam_beta1": "optim.adam_beta1", "adam_beta2": "optim.adam_beta2", "adam_eps": "optim.adam_eps",
    "clip_grad": "optim.clip_grad", "exp_avg_dtype": "optim.state_dtype", "exp_avg_sq_dtype": "optim.state_dtype",
}

# Fields rlrun cannot run: (what is missing). Refused naming it, not passed to megatron-core to fail on the GPU.
LACKING = {
    "attention_output_gate": "gated attention (Qwen3-Next, Qwen3.5): rlrun's layer spec does not build it",
    "layernorm_zero_centered_gamma": "zero-centred (1p) norms (Qwen3-Next, Qwen3.5): rlrun's norms "
                                     "(rlrun.train.megatron.layers) do not implement them",
    "moe_shared_expert_gate": "the gated shared expert (Qwen3-Next, Qwen3.5): rlrun's layer spec does not build it",
    "experimental_attention_variant": "hybrid layers (gated delta net, DSA): rlrun's layer spec does not build them",
    # TransformerConfig.__post_init__: "fused permutation is not available. Please install TE >= 2.1.0."
    "moe_permute_fusion": "the fused MoE permutation (Transformer Engine >= 2.1's kernels, which rlrun's GPU image "
                          "lacks): rlrun permutes with megatron-core's unfused path, the same math",
    "fp8": "FP8 training (needs Transformer Engine, which rlrun's GPU image lacks)",
    "fp8_recipe": "FP8 training (needs Transformer Engine, which rlrun's GPU image lacks)",
    "fp4": "FP4 training (needs Transformer Engine, which rlrun's GPU image lacks)",
}
# A value of a field rlrun otherwise passes through that needs what rlrun lacks.
LACKING_VALUES = {
    # megatron-core's _NCCLEPManager: "TransformerEngine NCCL EP is unavailable ... (NVTE_BUILD_WITH_NCCL_EP=1)"
    ("moe_flex_dispatcher_backend", "ncclep"): "NCCL EP (a Transformer Engine build with NCCL EP, which rlrun's "
                                               "GPU image lacks): use the deepep or hybridep backend",
}
# Python modules megatron-core imports for a setting, found (or not) where the trainer runs: the preflight asks
# for them (requires(), BackendKind.passthrough_requires), not validate: installing one makes the config runnable.
# megatron-core 0.19.2 megatron/core/transformer/moe/fused_a2a.py: `from deep_ep import Buffer` (DeepEP) and
# `from deep_ep import HybridEPBuffer` (HybridEP, DeepEP's hybrid-ep branch), each behind a try/except that leaves
# the dispatcher to raise ImportError when it is built on the GPU.
DEEP_EP_INSTALL = ("install DeepEP where the trainer runs (https://github.com/deepseek-ai/DeepEP: built from source "
                   "against NVSHMEM and the CUDA toolkit; HybridEP from its hybrid-ep branch), or run megatron-core's "
                   "own all-to-all: train.megatron.moe_token_dispatcher_type=alltoall without moe_enable_deepep")


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(SCHEMA_JSON.read_text())


def _type_ok(facts: dict, value: Any) -> bool:
    accepts = facts["accepts"]
    if value is None:
        return "null" in accepts
    if isinstance(value, bool):
        return "bool" in accepts
    if isinstance(value, int):
        return bool({"int", "float"} & set(accepts))
    if isinstance(value, float):
        return "float" in accepts
    if isinstance(value, str):
        return "str" in accepts
    if isinstance(value, (list, tuple)):
        return "list" in accepts
    return False


def _describe(facts: dict) -> str:
    kinds = " or ".join(k if k != "null" else "null" for k in facts["accepts"])
    return f"{kinds} ({facts['type']})"


def check_megatron_mapping(mapping: dict[str, Any], path: str = "train.megatron") -> list[Problem]:
    """Each key a field of the pinned megatron-core's config dataclasses, each value of its type and choices."""
    s = schema()
    fields, version = s["fields"], s["megatron_core_version"]
    problems = []
    for key, value in mapping.items():
        where = f"{path}.{key}"
        if key not in fields:
            problems.append(Problem(where, f"{key!r} is not a field of megatron-core {version}'s "
                                           f"{', '.join(CLASSES)}{did_you_mean(key, list(fields))}",
                                    "use a field name of those dataclasses (the Megatron flag without its dashes, "
                                    "e.g. --optimizer-cpu-offload -> optimizer_cpu_offload)", value))
            continue
        if key in TYPED_FIELDS:
            problems.append(Problem(where, f"{key} is set by rlrun from {TYPED_FIELDS[key]}",
                                    f"remove {where} and set {TYPED_FIELDS[key]} instead", value))
            continue
        facts = fields[key]
        if facts["accepts"] is None:
            problems.append(Problem(where, f"{key} ({facts['type']}) cannot be given in YAML", f"remove {where}",
                                    value))
        elif not _type_ok(facts, value):
            problems.append(Problem(where, f"{key} must be {_describe(facts)}, got {value!r}",
                                    f"give a value of type {_describe(facts)}", value))
        elif facts["choices"] and value is not None and value not in facts["choices"]:
            problems.append(Problem(where, f"{key}={value!r} is not one of {facts['choices']}",
                                    f"pick one of {facts['choices']}", value))
        elif key in LACKING and value not in (False, None, facts["default"], _literal(facts["default"])):
            problems.append(Problem(where, f"{key}: rlrun lacks {LACKING[key]}", f"remove {where}", value))
        elif (key, value) in LACKING_VALUES:
            problems.append(Problem(where, f"{key}={value!r}: rlrun lacks {LACKING_VALUES[key, value]}",
                                    f"remove {where}", value))
    return problems


def _literal(text: str | None) -> Any:
    import ast
    try:
        return ast.literal_eval(text) if text is not None else None
    except (ValueError, SyntaxError):
        return text


def kwargs_for(mapping: dict[str, Any], cls: str) -> dict[str, Any]:
    """The train.megatron values that `cls` (one of CLASSES) takes, unchanged (an Enum-typed field keeps its
    member name: to_core converts it where megatron-core is imported). MLATransformerConfig takes its own
    fields and TransformerConfig's."""
    fields = schema()["fields"]
    owners = (cls, "TransformerConfig") if cls == "MLATransformerConfig" else (cls,)
    return {k: v for k, v in mapping.items() if k in fields and set(fields[k]["classes"]) & set(owners)}


def to_core(cls: str, mapping: dict[str, Any]) -> dict[str, Any]:
    """kwargs_for with Enum-typed fields turned into megatron-core's members (imports megatron-core)."""
    import importlib

    fields = schema()["fields"]
    out = {}
    for k, v in kwargs_for(mapping, cls).items():
        enum = fields[k]["enum"]
        if enum and isinstance(v, str):
            module, name = enum.rsplit(".", 1)
            v = getattr(importlib.import_module(module), name)[v]
        elif "list" in fields[k]["accepts"] and "Tuple" in fields[k]["type"] and isinstance(v, list):
            v = tuple(v)
        out[k] = v
    return out


def resolve_flag(flag: str, values: tuple[str, ...]) -> tuple[str, Any] | None:
    """A Megatron-LM command-line flag -> (field, value) as Megatron-LM's parser gives it; None: not a flag of
    one of the passed-through dataclasses. Raises ValueError for a value of the wrong type or choice."""
    facts = schema()["flags"].get(flag)
    if facts is None:
        return None
    field = facts["field"]
    f = schema()["fields"][field]
    if facts["action"] in ("store_true", "store_false"):
        if values:
            raise ValueError(f"{flag} is a switch, got {list(values)}")
        return field, facts["action"] == "store_true"
    if not values:
        raise ValueError(f"{flag} takes a value")
    accepts = f["accepts"] or []
    parsed = [_parse(v, accepts) for v in values]
    value: Any = parsed if (len(parsed) > 1 or ("list" in accepts and "str" not in accepts)) else parsed[0]
    if f["choices"] and value not in f["choices"]:
        raise ValueError(f"{flag} {' '.join(values)}: not one of {f['choices']}")
    return field, value


def _parse(text: str, accepts: list[str]) -> Any:
    if text == "None" and "null" in accepts:
        return None
    for kind, conv in (("int", int), ("float", float)):
        if kind in accepts or (kind == "int" and "list" in accepts):
            try:
                return conv(text)
            except ValueError:
                pass
    if "bool" in accepts and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if "str" in accepts or "list" in accepts:
        return text
    raise ValueError(f"{text!r} is not {' or '.join(accepts)}")


# Megatron-LM flags that switch on a field whose Megatron-LM command-line default differs from the dataclass's
# (schema "cli_default"): the import writes that default too, as Megatron-LM's parser would have it.
def cli_companions(field: str, value: Any) -> dict[str, Any]:
    """e.g. optimizer_cpu_offload=True -> optimizer_offload_fraction=1.0 (Megatron-LM's --optimizer-offload-fraction
    default; OptimizerConfig's is 0.0, which would offload nothing)."""
    if field == "optimizer_cpu_offload" and value:
        return {"optimizer_offload_fraction": schema()["fields"]["optimizer_offload_fraction"]["cli_default"]}
    return {}


def offload_fraction(mapping: dict[str, Any]) -> float:
    """The share of the optimizer's state (fp32 master + moments) megatron-core keeps in host memory."""
    if not mapping.get("optimizer_cpu_offload"):
        return 0.0
    return float(mapping.get("optimizer_offload_fraction", _literal(schema()["fields"]["optimizer_offload_fraction"]["default"])))


def check_config(cfg) -> list[Problem]:
    """check_megatron_mapping + what megatron-core (or Megatron-LM, whose flags slime passes) would refuse on the
    GPU, or what rlrun's backend cannot combine with it; each on its train.megatron key."""
    from rlrun.train.megatron import model_rules

    m = dict(cfg.train.megatron)
    problems = list(model_rules.check(cfg, lambda f: _literal(schema()["fields"][f]["default"])))
    if not m:  # sets nothing: nothing to check (and the 120 KB snapshot is not read: `rlrun plan` stays fast)
        return problems
    problems += check_megatron_mapping(m)
    if problems:
        return problems
    p = "train.megatron."
    fields = schema()["fields"]
    if m.get("optimizer_cpu_offload"):
        if not m.get("use_precision_aware_optimizer"):
            # megatron/training/arguments.py validate_args
            problems.append(Problem(p + "optimizer_cpu_offload", "the optimizer CPU offload must be used with "
                                    "use_precision_aware_optimizer (Megatron-LM asserts it: the hybrid device "
                                    "optimizer reuses that code path)",
                                    f"set {p}use_precision_aware_optimizer=true", True))
        if cfg.optim.state_dtype != "fp32":
            problems.append(Problem("optim.state_dtype", f"optim.state_dtype={cfg.optim.state_dtype} is rlrun's fused "
                                    "AdamW kernel on the GPU; with train.megatron.optimizer_cpu_offload megatron-core's "
                                    "hybrid device optimizer steps the moments (in fp32)",
                                    "set optim.state_dtype=fp32", cfg.optim.state_dtype))
    elif m.get("use_precision_aware_optimizer"):
        # OptimizerConfig.__post_init__: only Transformer Engine's FusedAdam (or the CPU offload's optimizer) has it
        problems.append(Problem(p + "use_precision_aware_optimizer", "megatron-core's precision-aware optimizer needs "
                                "Transformer Engine's FusedAdam unless optimizer_cpu_offload is on (OptimizerConfig."
                                "__post_init__), and rlrun's GPU image has no Transformer Engine",
                                "remove it; optim.state_dtype=bf16 keeps the Adam moments in bf16 with rlrun's fused "
                                "kernel", True))
    if not 0.0 <= float(m.get("optimizer_offload_fraction", 0.0)) <= 1.0:
        problems.append(Problem(p + "optimizer_offload_fraction", "is a fraction of the optimizer state",
                                "give a value in [0, 1]", m["optimizer_offload_fraction"]))
    if m.get("moe_router_enable_expert_bias") and (cfg.model.moe is None or cfg.model.moe.router != "sigmoid"):
        # TransformerConfig.__post_init__: "Expert bias for aux-loss-free routing only supports sigmoid score function"
        problems.append(Problem(p + "moe_router_enable_expert_bias", "megatron-core's expert bias (aux-loss-free "
                                "routing) needs the sigmoid router (TransformerConfig.__post_init__ raises otherwise)",
                                "use a model whose model.moe.router is sigmoid, or remove it", True))
    problems += _uneven_stages(cfg, m)
    problems += _flex_dispatcher(cfg, m)
    mla_only = [k for k in m if fields[k]["classes"] == ["MLATransformerConfig"]]
    if mla_only and cfg.model.mla is None:
        problems.append(Problem(p + mla_only[0], f"{', '.join(mla_only)}: fields of MLATransformerConfig, which "
                                "rlrun builds only for a multi-latent-attention model (model.mla)",
                                f"remove {p}{mla_only[0]} or use an MLA model", m[mla_only[0]]))
    return problems


# rlrun's dispatcher where train.megatron names none (rlrun.train.megatron.model.transformer_config)
DEFAULT_DISPATCHER = "alltoall"


def flex_backend(m: dict) -> str | None:
    """The flex dispatcher's backend megatron-core runs (moe_enable_deepep forces deepep: TransformerConfig.
    __post_init__), None where the dispatcher is not flex."""
    if m.get("moe_token_dispatcher_type", DEFAULT_DISPATCHER) != "flex":
        return None
    return "deepep" if m.get("moe_enable_deepep") else m.get("moe_flex_dispatcher_backend", "deepep")


def _flex_dispatcher(cfg, m: dict) -> list[Problem]:
    """What megatron-core 0.19.2 raises for the flex dispatcher's settings (TransformerConfig.__post_init__,
    MoEFlexTokenDispatcher/_HybridEPManager in transformer/moe/token_dispatcher.py), on the key the user set."""
    p, out = "train.megatron.", []
    backend, dispatcher = flex_backend(m), m.get("moe_token_dispatcher_type", DEFAULT_DISPATCHER)
    if m.get("moe_enable_deepep"):
        if backend is None:
            out.append(Problem(p + "moe_enable_deepep", "DeepEP is a backend of megatron-core's flex token dispatcher "
                               f"(TransformerConfig.__post_init__ raises otherwise); moe_token_dispatcher_type is "
                               f"{dispatcher!r}", f"set {p}moe_token_dispatcher_type=flex (slime's scripts pass "
                               "--moe-token-dispatcher-type flex beside --moe-enable-deepep)", True))
        elif m.get("moe_flex_dispatcher_backend") == "hybridep":
            out.append(Problem(p + "moe_flex_dispatcher_backend", "moe_enable_deepep selects the deepep backend; "
                               "megatron-core refuses hybridep beside it (TransformerConfig.__post_init__)",
                               f"remove {p}moe_enable_deepep or {p}moe_flex_dispatcher_backend", "hybridep"))
    if backend is None and "moe_flex_dispatcher_backend" in m:
        out.append(Problem(p + "moe_flex_dispatcher_backend", "megatron-core reads the flex dispatcher's backend only "
                           f"for moe_token_dispatcher_type=flex (here {dispatcher!r}): it would be ignored", f"set {p}moe_token_dispatcher_type=flex, or remove it",
                           m["moe_flex_dispatcher_backend"]))
    if backend is None or cfg.model.moe is None:
        return out
    if backend == "deepep" and m.get("moe_pad_expert_input_to_capacity"):
        out.append(Problem(p + "moe_pad_expert_input_to_capacity", "the flex dispatcher's deepep backend does not "
                           "pad expert inputs to capacity (TransformerConfig.__post_init__ raises)",
                           f"remove it, or use {p}moe_token_dispatcher_type=alltoall", True))
    if backend == "deepep" and cfg.parallelism.ep == 1:  # rlrun's expert TP is 1: TP x EP is EP
        out.append(Problem(p + "moe_token_dispatcher_type", "the flex dispatcher's deepep backend needs experts split "
                           "over ranks (megatron-core asserts expert TP x EP > 1; rlrun runs expert TP 1)",
                           "set parallelism.ep > 1, or use alltoall", "flex"))
    if backend == "hybridep" and not m.get("moe_hybridep_pad_uneven_dispatch_inputs"):
        # _HybridEPManager: "HybridEP dispatch expects equal per-rank input sizes"
        out.append(Problem(p + "moe_flex_dispatcher_backend", "HybridEP dispatches equal token counts from every "
                           "rank, and rlrun's packed micro-batches differ in length from rank to rank",
                           f"set {p}moe_hybridep_pad_uneven_dispatch_inputs=true (pads each to the group's largest)",
                           "hybridep"))
    return out


def requires(cfg) -> list[tuple[str, str, str]]:
    """(dotted key, Python module, the fix) for each module a train.megatron setting makes megatron-core
    import where the trainer runs (the preflight looks for them: rlrun.launch.preflight.embedded_ray)."""
    m = cfg.train.megatron
    backend = flex_backend(m)
    if backend not in ("deepep", "hybridep") or cfg.model.moe is None:
        return []
    key = next(k for k in ("moe_enable_deepep", "moe_flex_dispatcher_backend", "moe_token_dispatcher_type") if k in m)
    return [(f"train.megatron.{key}", "deep_ep", DEEP_EP_INSTALL)]


def _uneven_stages(cfg, m: dict) -> list[Problem]:
    """num_layers_in_first/last_pipeline_stage (Megatron's --decoder-first/last-pipeline-num-layers): the other
    stages split the remaining layers evenly (megatron-core TransformerConfig.__post_init__)."""
    first, last = m.get("num_layers_in_first_pipeline_stage"), m.get("num_layers_in_last_pipeline_stage")
    if first is None and last is None:
        return []
    pp, layers = cfg.parallelism.pp, cfg.model.num_layers
    key = "train.megatron.num_layers_in_" + ("last" if last is not None else "first") + "_pipeline_stage"
    if pp == 1:
        return [Problem(key, "sets the layers of an uneven pipeline stage, but parallelism.pp=1",
                        f"remove {key} or set parallelism.pp > 1", last if last is not None else first)]
    middle = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and (rest % middle or rest == 0)):
        return [Problem(key, f"model.num_layers={layers} minus the first/last stage's layers ({first or 0} + "
                        f"{last or 0}) does not split evenly over the other {middle} pipeline stage(s)",
                        "give first/last stage layers that leave a multiple of the other stages", last or first)]
    return []


def uneven_stages(cfg) -> bool:
    m = cfg.train.megatron
    return (m.get("num_layers_in_first_pipeline_stage") is not None
            or m.get("num_layers_in_last_pipeline_stage") is not None)


def to_flags(mapping: dict[str, Any]) -> list[list[str]]:
    """train.megatron -> Megatron-LM flags (the export to slime): a switch for a bool, `--flag value...` otherwise;
    a value equal to Megatron-LM's command-line default is left out (its parser gives it anyway)."""
    s = schema()
    by_field: dict[str, dict[str, str]] = {}
    for flag, facts in s["flags"].items():
        by_field.setdefault(facts["field"], {}).setdefault(facts["action"], flag)
    out = []
    for field, value in mapping.items():
        facts, flags = s["fields"].get(field, {}), by_field.get(field, {})
        if "cli_default" in facts and value == facts["cli_default"]:
            continue
        if isinstance(value, bool):
            flag = flags.get("store_true" if value else "store_false")
            if flag:
                out.append([flag])
            elif value != _literal(facts.get("default")):
                raise ValueError(f"train.megatron.{field}={value}: Megatron-LM has no flag that sets it")
        elif "value" in flags:
            vals = value if isinstance(value, (list, tuple)) else [value]
            out.append([flags["value"], *(str(v) for v in vals)])
        else:
            raise ValueError(f"train.megatron.{field}: Megatron-LM has no flag for it")
    return out
