"""Fill the values the YAML leaves null on purpose ("null = derived") before validation, so that the
frozen RunConfig holds concrete values. Works on the plain composed dict and never guesses: when the
inputs of a derivation have the wrong type it leaves the value alone (the schema reports the type);
when a value cannot be derived it reports a Problem (e.g. slime's TypeError when a disaggregated run
gives no rollout GPU count)."""
from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

from rlrun.config.engine_health import engine_loss_s
from rlrun.config.errors import Problem
from rlrun.config.kinds import LOSS_TYPES, TEACHERS


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _sec(raw: dict, name: str) -> dict:
    v = raw.get(name)
    return v if isinstance(v, dict) else {}


def _default(sec: dict, key: str, value: Any) -> None:
    """sec[key] = value when the YAML left it null (and the section and value make sense)."""
    if key in sec and sec[key] is None and value is not None:
        sec[key] = value


def _trains_on_data(algo: dict) -> bool:
    """algo.loss_type names a loss that trains on the data set with no engines (rlrun.config.kinds.LOSS_TYPES)."""

    name = algo.get("loss_type")
    return isinstance(name, str) and name in LOSS_TYPES and not LOSS_TYPES[name].needs_rollout


def fill_derived(raw: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    raw = copy.deepcopy(raw)
    problems: list[Problem] = []
    train, rollout, algo = _sec(raw, "train"), _sec(raw, "rollout"), _sec(raw, "algo")
    hw_defaults = _sec(_sec(raw, "hardware"), "defaults")
    if isinstance(raw.get("train"), dict) and isinstance(raw.get("rollout"), dict):  # else: the schema says so
        problems += _batch_identity(train, rollout)

    # Vendor defaults: e.g. offload on for NVIDIA colocation, off on AMD (the seed recipe's choice).
    _default(train, "offload", hw_defaults.get("offload_train"))
    _default(rollout, "offload", hw_defaults.get("offload_rollout"))
    _default(train, "gradient_accumulation_fusion", hw_defaults.get("gradient_accumulation_fusion"))

    if _int(train.get("num_nodes")) and _int(train.get("gpus_per_node")) and train["num_nodes"] > 0 < train["gpus_per_node"]:
        trainer_gpus = train["num_nodes"] * train["gpus_per_node"]
        if train.get("colocate") is True:
            _default(rollout, "num_gpus", trainer_gpus)  # colocated engines share the trainer's GPUs
        elif train.get("colocate") is False and rollout.get("num_gpus", 0) is None and _trains_on_data(algo):
            rollout["num_gpus"] = rollout.get("gpus_per_engine") or 1  # unused: no engine is placed (sft_loss)
        elif train.get("colocate") is False and rollout.get("num_gpus", 0) is None:
            problems.append(Problem(
                "rollout.num_gpus", "is null but train.colocate is false: a disaggregated run needs its own "
                "rollout GPU count (slime crashes with a TypeError here)",
                "set rollout.num_gpus (a multiple of rollout.gpus_per_engine), or train.colocate=true", None))

    _default(rollout, "over_sampling_batch_size", rollout.get("rollout_batch_size"))
    _default(rollout, "context_length", _sec(raw, "model").get("max_position_embeddings"))
    _default(rollout, "retry_window_s", engine_loss_s())
    _default(train, "log_probs_max_tokens_per_gpu", train.get("max_tokens_per_gpu"))
    _default(algo, "eps_clip_high", algo.get("eps_clip"))
    _default(algo, "rs_clip", algo.get("tis_clip"))
    _default(algo, "rs_clip_low", algo.get("tis_clip_low"))
    if rollout.get("n_samples_per_prompt") == 1 and "normalize_std" in algo:
        algo["normalize_std"] = False  # the std of a group of one is undefined (slime turns it off too)

    ev = _sec(raw, "eval")
    for key in ("max_response_len", "top_p", "temperature", "top_k"):
        _default(ev, key, rollout.get(key))
    for ds in ev.get("datasets") or []:  # a dataset's own sampling, else the eval section's
        if isinstance(ds, dict):
            for key in ("n_samples_per_prompt", "max_response_len", "top_p", "temperature", "top_k"):
                if ds.get(key) is None:
                    ds[key] = ev.get(key)
    ckpt = _sec(raw, "checkpoint")
    hub_id = _sec(raw, "model").get("hub_id")
    if isinstance(hub_id, str) and ckpt.get("random_init") is False:
        from rlrun.config.hub import cached_snapshot

        # a released model means its weights: the local HF cache dir, else the hub id (the preflight refuses it)
        _default(ckpt, "hf", cached_snapshot(hub_id) or hub_id)
    _default(ckpt, "ref", ckpt.get("hf"))
    optim = _sec(raw, "optim")
    _default(optim, "critic_lr", optim.get("lr"))
    reward_model = _sec(_sec(raw, "reward"), "model")
    if reward_model.get("checkpoint") is not None:  # (without one no engine is started: nothing to derive)
        _default(reward_model, "engine", rollout.get("engine"))
    distill = _sec(_sec(raw, "algo"), "distill")
    where = distill.get("where")
    if distill.get("teacher") is not None and where in TEACHERS and TEACHERS[where].served:
        # a served teacher's engines: the rollout's kind unless named
        _default(_sec(distill, "served"), "engine", rollout.get("engine"))
    return raw, problems


def _batch_identity(train: dict, rollout: dict) -> list[Problem]:
    """rollout_batch_size * n_samples_per_prompt == global_batch_size * num_steps_per_rollout:
    derive the missing side as slime does; consistency of two given values is checked in rules."""
    pair = ("train.global_batch_size", "train.num_steps_per_rollout")
    # whichever side stayed null belongs to this problem, not to a second one
    return [replace(p, covers=pair) for p in _derive_batch_identity(train, rollout)]


def _derive_batch_identity(train: dict, rollout: dict) -> list[Problem]:
    rbs, n = rollout.get("rollout_batch_size"), rollout.get("n_samples_per_prompt")
    gbs, steps = train.get("global_batch_size"), train.get("num_steps_per_rollout")
    if not (_int(rbs) and _int(n) and rbs > 0 and n > 0):
        return []
    samples = rbs * n
    if gbs is None and steps is None:
        return [Problem("train.global_batch_size",
                        "both train.global_batch_size and train.num_steps_per_rollout are null",
                        f"set train.num_steps_per_rollout (e.g. 1 -> global_batch_size {samples}) "
                        f"or train.global_batch_size (samples per optimizer step)")]
    if gbs is None and _int(steps) and steps > 0:
        if samples % steps:
            return [Problem("train.num_steps_per_rollout",
                            f"rollout_batch_size * n_samples_per_prompt = {rbs} * {n} = {samples} samples do not "
                            f"split into {steps} equal optimizer steps", _divisor_fix("train.num_steps_per_rollout",
                                                                                     samples, steps), steps)]
        train["global_batch_size"] = samples // steps
    elif steps is None and _int(gbs) and gbs > 0:
        if samples % gbs:
            return [Problem("train.global_batch_size",
                            f"rollout_batch_size * n_samples_per_prompt = {rbs} * {n} = {samples} samples per "
                            f"rollout is not a multiple of global_batch_size {gbs}", batch_fix(rbs, n, gbs), gbs)]
        train["num_steps_per_rollout"] = samples // gbs
    return []


def _divisor_fix(path: str, samples: int, value: int) -> str:
    divisors = [d for d in range(1, samples + 1) if samples % d == 0]
    near = sorted(divisors, key=lambda d: (abs(d - value), d))[:2]
    return f"set {path} to a divisor of {samples}, e.g. {' or '.join(map(str, sorted(near)))}"


def batch_fix(rbs: int, n: int, gbs: int) -> str:
    """Two ways to make global_batch_size `gbs` fit rollout_batch_size * n_samples_per_prompt, each
    computed so that the identity holds: a divisor of the samples near gbs (the rollout unchanged), or
    the smallest rollout_batch_sizes whose samples gbs divides (gbs unchanged)."""
    samples = rbs * n
    divisors = [d for d in range(1, samples + 1) if samples % d == 0]
    near = sorted(sorted(divisors, key=lambda d: (abs(d - gbs), d))[:2], reverse=True)
    keep_rollout = " or ".join(f"{d} (train.num_steps_per_rollout={samples // d})" for d in near)
    step = gbs // math.gcd(gbs, n)  # rollout_batch_size must be a multiple of this for gbs | rbs * n
    keep_gbs = " or ".join(f"{k * step} (train.num_steps_per_rollout={k * step * n // gbs})" for k in (1, 2))
    return (f"set train.global_batch_size to a divisor of {samples}: {keep_rollout}; or keep global_batch_size "
            f"{gbs} and set rollout.rollout_batch_size to a multiple of {step}: {keep_gbs}")
