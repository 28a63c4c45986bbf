"""SGLang server arguments from the typed rollout config + the free-form `rollout.sglang` mapping.

Pure Python (no torch/ray/sglang): the config layer calls check_sglang_mapping() at validation
time, long before a GPU is touched. Field names, types, CLI flags and argparse actions come from
the pinned sglang's ServerArgs (server_args.json, see schema.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rlrun.config.errors import Problem, closest, did_you_mean
from rlrun.config.memory import engine_fraction
from rlrun.config.sizes import push_flushes_cache
from rlrun.rollout.engines.sglang.schema import server_args_schema

# ServerArgs fields that rlrun sets from typed config; setting them in rollout.sglang is an error
# because two sources of truth for one value drift apart.
TYPED_FIELDS = {
    "model_path": "checkpoint.hf", "tokenizer_path": "checkpoint.hf",
    "tp_size": "rollout.gpus_per_engine", "mem_fraction_static": "rollout.mem_fraction_static",
    "context_length": "rollout.context_length", "random_seed": "run.seed",
    "enable_memory_saver": "rollout.offload", "host": "(the engine node's address, chosen by rlrun)",
    "port": "(chosen by rlrun per engine)", "nccl_port": "(chosen by rlrun per engine)",
    "base_gpu_id": "(from the placement plan)", "dist_init_addr": "(chosen by rlrun per engine)",
    # an engine wider than a node: one process per node (rlrun.rollout.engines.sglang.engine.RaySGLangEngine)
    "nnodes": "rollout.gpus_per_engine / hardware.gpus_per_node", "node_rank": "(one per node of the engine)",
}


# Arguments whose value makes SGLang import a package it does not depend on: (field, value) -> (module, fix).
# sglang 0.5.16 srt/layers/moe/token_dispatcher/deepep.py: `from deep_ep import Buffer, Config` behind a try/except;
# the dispatcher raises "DeepEP is not installed" when the engine builds its MoE layers.
ARG_MODULES = {
    ("moe_a2a_backend", "deepep"): ("deep_ep", "install DeepEP where the SGLang engines run "
                                               "(https://github.com/deepseek-ai/DeepEP: built from source against "
                                               "NVSHMEM and the CUDA toolkit), or remove "
                                               "rollout.sglang.moe_a2a_backend (SGLang's own all-to-all)"),
}


def requires(mapping: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(argument, Python module, the fix) for each rollout.sglang value that needs a module sglang does
    not depend on (the preflight looks for it: rlrun.launch.preflight.embedded_ray)."""
    return [(key, *ARG_MODULES[key, value]) for key, value in mapping.items()
            if isinstance(value, str) and (key, value) in ARG_MODULES]


def _type_ok(annotation: str, value: Any) -> bool:
    """A light check of a YAML value against the ServerArgs annotation (Optional/List/Union aware)."""
    if value is None:
        return "Optional" in annotation or "None" in annotation
    base = re.sub(r"Optional\[(.*)\]", r"\1", annotation)
    if base.startswith(("List", "list")):
        return isinstance(value, (list, tuple))
    if base == "bool":
        return isinstance(value, bool)
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "str" or base.startswith("Literal"):
        return isinstance(value, str)
    return True  # Union/Dict/custom types: SGLang's own parser decides


def _bad_choice(cli: dict, value: Any) -> bool:
    """A value outside the flag's choices (server_args.json, resolved from sglang's module constants). A list SGLang
    plugins extend at import (choices_extensible: add_attention_backend_choices and friends) cannot be known whole
    before the engine starts: there only a value close to a known one is refused (a misspelling: "deepgem"), and
    any other is left to SGLang's own parser (a plugin's backend)."""
    choices = cli["choices"]
    if not isinstance(choices, list) or value in choices:
        return False
    return not cli.get("choices_extensible") or closest(str(value), choices) is not None


def check_sglang_mapping(mapping: dict[str, Any], path: str = "rollout.sglang") -> list[Problem]:
    fields = server_args_schema()["fields"]
    version = server_args_schema()["sglang_version"]
    renamed = server_args_schema()["renamed"]
    problems = _one_field_twice(mapping, renamed, path)
    for key, value in mapping.items():
        where = f"{path}.{key}"
        if key in renamed:  # an older spelling SGLang still accepts (with a warning): check it as its field
            alias, field = renamed[key], fields.get(renamed[key]["field"], {})
            if alias["field"] in TYPED_FIELDS:
                problems.append(Problem(where, f"{key} sets {alias['field']}, which rlrun sets from "
                                               f"{TYPED_FIELDS[alias['field']]}",
                                        f"remove {where} and set {TYPED_FIELDS[alias['field']]} instead", value))
            elif alias["action"] == "store_true":
                if not isinstance(value, bool):
                    problems.append(Problem(where, f"{key} is a switch, got {value!r}", "give true or false", value))
            elif alias["nargs"] is None and "type" in field and not _type_ok(field["type"], value):
                problems.append(Problem(where, f"{key} (SGLang's older name of {alias['field']}) must be "
                                               f"{field['type']}, got {value!r}",
                                        f"give a value of type {field['type']}", value))
            elif _bad_choice(alias, value):
                problems.append(Problem(where, f"{key}={value!r} is not one of {alias['choices']}"
                                               f"{did_you_mean(value, alias['choices'])}",
                                        f"pick one of {alias['choices']}", value))
            continue
        if key not in fields:
            problems.append(Problem(where, f"{key!r} is not a field of sglang {version} ServerArgs"
                                           f"{did_you_mean(key, [*fields, *renamed])}",
                                    "use a ServerArgs field name (snake_case, as in `python -m "
                                    "sglang.launch_server --help` with dashes -> underscores)", value))
            continue
        if key in TYPED_FIELDS:
            problems.append(Problem(where, f"{key} is set by rlrun from {TYPED_FIELDS[key]}",
                                    f"remove {where} and set {TYPED_FIELDS[key]} instead", value))
            continue
        facts = fields[key]
        if facts["cli"] is None:
            problems.append(Problem(where, f"{key} has no command-line flag in sglang {version}",
                                    f"remove {where}", value))
        elif not _type_ok(facts["type"], value):
            problems.append(Problem(where, f"{key} must be {facts['type']}, got {value!r}",
                                    f"give a value of type {facts['type']}", value))
        elif _bad_choice(facts["cli"], value):
            problems.append(Problem(where, f"{key}={value!r} is not one of {facts['cli']['choices']}"
                                           f"{did_you_mean(value, facts['cli']['choices'])}",
                                    f"pick one of {facts['cli']['choices']}", value))
    return problems


def _one_field_twice(mapping: dict[str, Any], renamed: dict, path: str) -> list[Problem]:
    """Keys that set the same ServerArgs field: a field and an older spelling of it (cuda_graph_max_bs_decode and
    cuda_graph_max_bs), or two older spellings. SGLang's parser keeps whichever comes last on the command line, so
    the other would be dropped without a word; refused unless they are plain aliases given the same value. A switch
    set to false passes no flag and sets nothing."""
    by_field: dict[str, list[tuple[str, Any]]] = {}
    for key, value in mapping.items():
        alias = renamed.get(key)
        if alias is not None and alias["action"] == "store_true" and value is not True:
            continue
        by_field.setdefault(alias["field"] if alias else key, []).append((key, value))
    problems = []
    for field, keys in by_field.items():
        plain = all(k not in renamed or renamed[k]["action"] == "value" for k, _ in keys)
        if len(keys) < 2 or (plain and len({repr(v) for _, v in keys}) == 1):
            continue
        given = ", ".join(f"{path}.{k}={v!r}" for k, v in keys)
        problems.append(Problem(f"{path}.{keys[0][0]}", f"{given} all set SGLang's {field} (older names SGLang still "
                                f"accepts set it too); its parser keeps whichever comes last on the command line "
                                f"and drops the others without a word",
                                f"keep one of them: {path}.{field}", keys[0][1]))
    return problems


@dataclass(frozen=True)
class EngineSlot:
    """Where one engine (or, for an engine spanning nodes, its part on one node) runs: its rank, first GPU
    (CUDA index on the node) and ports; nnodes > 1: this part's node_rank and node 0's host:port."""

    rank: int
    base_gpu_id: int
    port: int
    nccl_port: int
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    host: str | None = None  # where the server binds and is reached (its node's IP); None: rollout.router.host


def server_args(cfg, slot: EngineSlot, model_path: str | None = None) -> dict[str, Any]:
    """ServerArgs fields (name -> value) for one engine, typed values first, then rollout.sglang."""
    r = cfg.rollout
    problems = check_sglang_mapping(r.sglang)
    if problems:
        from rlrun.config.errors import ConfigError

        raise ConfigError(problems)
    model_path = model_path or cfg.checkpoint.hf
    if model_path is None:
        raise ValueError("engine=sglang needs checkpoint.hf (an HF model dir SGLang can load); random "
                         "init is only available with rollout.engine=hf")
    args = {
        "model_path": model_path,
        "host": slot.host or r.router.host,
        "port": slot.port,
        "nccl_port": slot.nccl_port,
        # an engine's GPUs are pp_size pipeline stages of tp_size GPUs (slime: sglang_tp_size = gpus per engine
        # // sglang_pp_size); rlrun.config.rules._sglang_pp refuses a pp_size that does not divide them
        "tp_size": r.gpus_per_engine // max(1, r.sglang.get("pp_size") or 1),
        "base_gpu_id": slot.base_gpu_id,
        "mem_fraction_static": engine_fraction(cfg)[0],
        "context_length": r.context_length,
        "random_seed": cfg.run.seed + slot.rank,  # as slime: distinct sampling streams per engine
    }
    if slot.nnodes > 1:  # every node of the engine runs tp_size / nnodes of its TP ranks (SGLang's --nnodes)
        if slot.dist_init_addr is None:
            raise ValueError(f"engine {slot.rank} spans {slot.nnodes} nodes but has no dist_init_addr (node 0's host:port)")
        args.update(nnodes=slot.nnodes, node_rank=slot.node_rank, dist_init_addr=slot.dist_init_addr)
    if r.offload:
        args["enable_memory_saver"] = True  # needed for /release_memory_occupation to free memory
    if not push_flushes_cache(cfg):  # stale prefixes could never be flushed (rlrun.config.sizes); rollout.sglang wins
        args["disable_radix_cache"] = True
    if r.routing_replay:  # the routed experts of each request (slime: --use-rollout-routing-replay sets it)
        args["enable_return_routed_experts"] = True
    args.update(r.sglang)
    return args


def to_argv(args: dict[str, Any]) -> list[str]:
    """ServerArgs fields -> `python -m sglang.launch_server` flags, by each field's argparse action."""
    fields, renamed = server_args_schema()["fields"], server_args_schema()["renamed"]
    argv: list[str] = []
    for name, value in args.items():
        cli = renamed[name] if name in renamed else fields[name]["cli"]
        flag, action = cli["flag"], cli["action"]
        if action == "store_true":
            if value:
                argv.append(flag)
            continue
        if action == "argparse.BooleanOptionalAction":
            argv.append(flag if value else "--no-" + flag.removeprefix("--"))
            continue
        if value is None:
            continue
        if isinstance(value, dict):
            argv += [flag, json.dumps(value)]
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv
