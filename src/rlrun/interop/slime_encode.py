"""Resolved rlrun config (a plain dict) -> slime flag arrays, by the rows of slime_table.py plus the
settings whose flags span several rows (GQA, rope scaling, MoE/MLA, eval sets, wandb, --sglang-*)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlrun.interop.slime_table import (
    ARRAYS, ATTENTION_BACKEND, CONSTANT_FLAGS, ENTRY_ASYNC, FAMILY_FLAGS, ICEPOP_FUNCTION, KEEP, LAUNCH, MOE_FLAGS,
    ROWS, Row,
)
from rlrun.interop import slime_agent, slime_modes, slime_weight_sync
from rlrun.interop.slime_values import fmt, get_path, same, slime_default

POST_NORM_FLAGS = ("--post-self-attn-layernorm", "--post-mlp-layernorm")


@dataclass
class Encoded:
    arrays: dict[str, list[list[str]]]  # array -> flags, each [flag, *values]
    launch: list[list[str]]
    entry: str
    comments: dict[str, list[str]] = field(default_factory=dict)  # array -> comment lines


def flat_values(cfg: dict) -> dict[str, Any]:
    return {r.path: get_path(cfg, r.path) for r in ROWS}


def encode(cfg: dict) -> Encoded:
    values = flat_values(cfg)
    arrays: dict[str, list[list[str]]] = {a: [] for a in (*ARRAYS, LAUNCH)}
    comments: dict[str, list[str]] = {a: [] for a in ARRAYS}
    for row in ROWS:
        if row.section and get_path(cfg, row.section) is None:
            continue
        if row.path == "data.rm_type" and str(values[row.path]).startswith("slime:"):
            continue  # slime's reward function: --custom-rm-path (slime_agent.encode)
        tokens = _encode_row(row, values[row.path], values)
        if tokens:
            arrays[row.array].append(tokens)
    _encode_model(cfg, arrays["MODEL_ARGS"])
    _encode_misc(cfg, arrays, comments)
    entry = ENTRY_ASYNC if cfg["train"]["async_train"] else "train.py"
    launch = arrays.pop(LAUNCH)
    return Encoded(arrays, launch, entry, comments)


def _encode_row(row: Row, value: Any, values: dict[str, Any]) -> list[str] | None:
    if value is None:
        return None
    default = slime_default(row, values)
    if not row.always and default is not KEEP and same(value, default):
        return None
    to_slime = dict(row.values)
    if row.type is int and isinstance(value, float):  # e.g. a float timeout for an int-typed slime flag
        value = math.ceil(value)
    if row.kind == "value":
        return [row.flag, fmt(to_slime.get(value, value * row.scale if row.scale != 1 else value))]
    if row.kind == "true":
        return [row.flag] if value else None
    if row.kind == "false":
        return None if value else [row.flag]
    if row.kind == "bool":
        return [row.flag] if value else ["--no-" + row.flag[2:]]
    if row.kind == "list":
        return [row.flag, *map(fmt, value)] if value else None
    raise ValueError(f"slime_table.py: row {row.path} has unknown kind {row.kind!r}")


def _encode_model(cfg: dict, out: list[list[str]]) -> None:
    m = cfg["model"]
    out[:0] = [[flag, *vals] for flag, vals in FAMILY_FLAGS.get(m["family"], ()) if flag == "--spec"]
    if m["num_query_groups"] != m["num_attention_heads"] and not m["mla"]:
        out.append(["--group-query-attention"])
        out.append(["--num-query-groups", str(m["num_query_groups"])])
    if not same(m["rope_scaling_factor"], 1.0):
        if m["family"] == "llama":
            out.append(["--use-rope-scaling"])
        out.append(["--rotary-scaling-factor", fmt(m["rope_scaling_factor"])])
    if m["post_norms"]:
        out.extend([[f] for f in POST_NORM_FLAGS])
    out.extend([flag, *vals] for flag, vals in FAMILY_FLAGS.get(m["family"], ()) if flag != "--spec")
    if m["mla"]:
        out.append(["--multi-latent-attention"])
    if m["moe"]:
        k, layers = m["moe"]["first_k_dense"], m["num_layers"]
        if k:
            out.append(["--moe-layer-freq", f"[0]*{k}+[1]*{layers - k}"])
        out.extend([flag, *vals] for flag, vals in MOE_FLAGS)
    for array, flag, vals in CONSTANT_FLAGS:
        if array == "MODEL_ARGS":
            out.append([flag, *vals])


def _encode_tis(algo: dict, arrays: dict[str, list[list[str]]], comments: dict[str, list[str]]) -> None:
    """algo.tis_mode/tis_level: slime's built-in TIS is token/truncate; token/mask is its icepop function."""
    mode, level = algo["tis_mode"], algo["tis_level"]
    mis = {k: algo[k] for k in ("use_rs", "tis_batch_normalize") if algo[k]}
    if algo["tis_reject_scope"] != "pg":
        mis["tis_reject_scope"] = algo["tis_reject_scope"]
    if (mode, level) == ("mask", "token") and not mis:
        arrays["GRPO_ARGS"].append(["--custom-tis-function-path", ICEPOP_FUNCTION])
    elif (mode, level) != ("truncate", "token") or mis:
        extra = "".join(f" algo.{k}={v}" for k, v in mis.items())
        comments["GRPO_ARGS"].append(f"algo.tis_mode={mode} algo.tis_level={level}{extra}: no slime flag (its "
                                     "examples/train_infer_mismatch_helper/mis.py does it through "
                                     "--custom-tis-function-path and a config)")
    if algo["use_opsm"] and algo["opsm_reference"] != "old":
        comments["GRPO_ARGS"].append(f"algo.opsm_reference={algo['opsm_reference']}: slime measures OPSM against "
                                     "old_log_probs (no flag)")


def _encode_misc(cfg: dict, arrays: dict[str, list[list[str]]], comments: dict[str, list[str]]) -> None:
    ck = cfg["checkpoint"]
    if cfg["run"]["resume"] != "never" and ck["load"] is None and ck["save"]:  # slime resumes through --load
        arrays["CKPT_ARGS"].append(["--load", ck["save"]])
    _encode_tis(cfg["algo"], arrays, comments)
    if cfg["optim"]["state_dtype"] != "fp32":  # Megatron takes both moments' dtypes, on its TE optimizer
        arrays["OPTIMIZER_ARGS"] += [["--exp-avg-sq-dtype", cfg["optim"]["state_dtype"]],
                                     ["--use-precision-aware-optimizer"]]
    for array, flag, vals in CONSTANT_FLAGS:
        if array != "MODEL_ARGS":
            arrays[array].append([flag, *vals])
    if not cfg["model"]["mla"]:
        arrays[ATTENTION_BACKEND[0]].append([ATTENTION_BACKEND[1], *ATTENTION_BACKEND[2]])
    datasets = cfg["eval"]["datasets"]
    if datasets:
        arrays["EVAL_ARGS"].append(["--eval-prompt-data", *[x for d in datasets for x in (d["name"], d["path"])]])
    for d in datasets:
        if d["rm_type"] != cfg["data"]["rm_type"]:
            comments["EVAL_ARGS"].append(
                f"eval.datasets[{d['name']}].rm_type={d['rm_type']}: slime scores eval with --rm-type "
                f"({cfg['data']['rm_type']}) unless an --eval-config file says otherwise")
        for key in ("n_samples_per_prompt", "max_response_len", "top_p", "temperature", "top_k"):
            if d.get(key) is not None and d[key] != cfg["eval"][key]:
                comments["EVAL_ARGS"].append(
                    f"eval.datasets[{d['name']}].{key}={d[key]}: slime takes a dataset's own value from an "
                    f"--eval-config file only (the --eval-* flags say {cfg['eval'][key]})")
    slime_agent.encode(cfg, arrays, comments)
    slime_modes.encode(cfg, arrays, comments)
    slime_weight_sync.encode(cfg, arrays, comments)
    wandb = cfg["logging"]["wandb"]
    if wandb["mode"] != "disabled":
        arrays["MISC_ARGS"].extend([["--use-wandb"], ["--wandb-mode", wandb["mode"]]])
        arrays["MISC_ARGS"].append(["--wandb-project", wandb["project"]])
        for flag, key in (("--wandb-team", "entity"), ("--wandb-group", "group"), ("--wandb-host", "host")):
            if wandb.get(key):
                arrays["MISC_ARGS"].append([flag, wandb[key]])
    from rlrun.train.megatron import passthrough
    try:  # train.megatron: megatron-core fields, each under the Megatron flag that sets it
        arrays["PERF_ARGS"].extend(passthrough.to_flags(cfg["train"].get("megatron") or {}))
    except ValueError as exc:
        comments["PERF_ARGS"].append(str(exc))
    for key, value in cfg["rollout"]["sglang"].items():
        flag = "--sglang-" + key.replace("_", "-")
        if value is True:
            arrays["SGLANG_ARGS"].append([flag])
        elif isinstance(value, (list, tuple)):
            arrays["SGLANG_ARGS"].append([flag, *map(fmt, value)])
        elif value not in (None, False):
            arrays["SGLANG_ARGS"].append([flag, fmt(value)])
