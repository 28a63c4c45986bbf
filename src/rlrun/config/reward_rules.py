"""Rules of the reward engines (reward.model, docs/rewards.md "Reward engines"): a judge model served by an engine
kind that can judge, placed where there are GPUs for it, asked with templates and a parser that can work; every
reward.model setting a run would ignore is refused."""
from __future__ import annotations

import re
import string
from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import ENGINES, REWARDS, needs_rollout, use_reward_model, use_teacher_engines
from rlrun.config.memory import engine_fraction
from rlrun.config.plan import engine_slots, reward_slots, teacher_slots, trainer_slots
from rlrun.config.registry import RULES
from rlrun.config.schema import RunConfig

FIELDS = ("prompt", "response", "label")  # what prompt_template and target may name (rlrun.reward.judge.render)
# a static-pool engine's share of a GPU plus a colocated reward engine's: above this SGLang has no room for its
# CUDA graphs and activations (its own default mem_fraction_static leaves ~0.1-0.2 of the GPU for them)
MAX_SHARED_FRACTION = 0.9


def template_problems(key: str, template: str) -> Iterator[Problem]:
    """A str.format template naming only FIELDS (anything else would fail every request, counted as errors)."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        yield Problem(key, f"{template!r} is not a format template: {e}", "write fields as {prompt}, {response} or "
                      "{label}, and a literal brace as {{ or }}", template)
        return
    bad = [f for f in names if f not in FIELDS]
    if bad:
        yield Problem(key, f"{template!r} names {bad}; a judge's template knows {', '.join(FIELDS)}",
                      "use {prompt}, {response} and {label} only (a literal brace is {{ or }})", template)


@RULES
def reward_engines(cfg: RunConfig) -> Iterator[Problem]:
    m = cfg.reward.model
    judged_types = [name for name, kind in REWARDS.items() if kind.judged]  # rm_type reward_model (rlrun.reward.spec)
    users = [("data.rm_type", cfg.data.rm_type)] + [(f"eval.datasets.{i}.rm_type", ds.rm_type)
                                                    for i, ds in enumerate(cfg.eval.datasets)]
    judged = [path for path, t in users if t in judged_types]
    if m.checkpoint is None:
        if judged:
            yield Problem(judged[0], f"rm_type {judged_types[0]} asks the reward engines, but reward.model.checkpoint "
                          "is null (no reward engine is started)", "set reward.model.checkpoint to the reward "
                          "model's HF dir, or another rm_type", judged_types[0])
        # the conf/config.yaml values of the keys that shape the engines (the judge's keys only matter with them)
        defaults = {"engine": None, "num_engines": 1, "gpus_per_engine": 1, "colocate": True, "mode": "discriminative"}
        for key, off in defaults.items():
            if getattr(m, key) != off:
                yield Problem(f"reward.model.{key}", "is set but reward.model.checkpoint is null, so no reward engine "
                              "is started and it would be ignored", "set reward.model.checkpoint to the reward "
                              f"model's HF dir, or drop reward.model.{key}", getattr(m, key))
        return
    if not needs_rollout(cfg):
        yield Problem("reward.model.checkpoint", f"reward engines judge generated samples; algo.loss_type="
                      f"{cfg.algo.loss_type} generates none, so they would be ignored",
                      "set reward.model.checkpoint=null, or train with RL (algo=grpo)", m.checkpoint)
        return
    if not judged:
        yield Problem("reward.model.checkpoint", f"is set but no rm_type is {judged_types[0]} (data.rm_type is "
                      f"{cfg.data.rm_type!r}), so the reward engines would judge nothing",
                      f"set data.rm_type={judged_types[0]}, or reward.model.checkpoint=null", m.checkpoint)
    yield from served_problems(cfg, "reward.model", m, "judge", "serve a judge (/generate's token_ids_logprob and "
                               "text generation)", "reward")
    if m.gpus_per_engine > cfg.hardware.gpus_per_node:
        return
    yield from template_problems("reward.model.prompt_template", m.prompt_template)
    if m.mode == "discriminative":
        yield from template_problems("reward.model.target", m.target)
        if not m.target:
            yield Problem("reward.model.target", "is empty: a discriminative judge scores the probability of one "
                          "token", "set reward.model.target to the judge's 'yes' token (e.g. yes)", m.target)
    else:
        try:
            groups = re.compile(m.parser).groups
        except re.error as e:
            yield Problem("reward.model.parser", f"{m.parser!r} is not a regular expression: {e}",
                          "write a Python regex whose first group captures the score, e.g. (\\d+(?:\\.\\d+)?)", m.parser)
            return
        if groups < 1:
            yield Problem("reward.model.parser", f"{m.parser!r} has no group: the parser reads the score from its "
                          "first group", "put the score in parentheses, e.g. Score: (\\d+)", m.parser)


def served_problems(cfg: RunConfig, key: str, m, capability: str, does: str, what: str) -> Iterator[Problem]:
    """A served model's engines (a ServedSection `m` at `key`: reward.model, algo.distill.served): an engine kind
    whose spec has `capability` (it must `does`), on the hardware, as wide as the kind and a node allow, and a
    budget of GPUs and memory."""
    kind = ENGINES[m.engine]
    if not getattr(kind, capability):
        can = [e for e, spec in ENGINES.items() if getattr(spec, capability)]
        yield Problem(f"{key}.engine", f"the {m.engine} engine does not {does}", f"set {key}.engine="
                      f"{' or '.join(can)}", m.engine)
    if kind.needs_gpu and cfg.hardware.vendor == "cpu":
        cpu = [e for e, spec in ENGINES.items() if not spec.needs_gpu and getattr(spec, capability)]
        yield Problem(f"{key}.engine", f"{m.engine} needs GPUs; hardware is cpu",
                      f"set {key}.engine={' or '.join(cpu)} or pick GPU hardware", m.engine)
    if kind.max_gpus_per_engine is not None and m.gpus_per_engine > kind.max_gpus_per_engine:
        wide = [e for e, spec in ENGINES.items() if getattr(spec, capability)
                and (spec.max_gpus_per_engine or m.gpus_per_engine) >= m.gpus_per_engine]
        yield Problem(f"{key}.gpus_per_engine", f"the {m.engine} engine runs on {kind.max_gpus_per_engine} "
                      f"device(s), got {m.gpus_per_engine}", f"set {key}.gpus_per_engine="
                      f"{kind.max_gpus_per_engine}" + "".join(f" or {key}.engine={e}" for e in wide),
                      m.gpus_per_engine)
    if m.gpus_per_engine > cfg.hardware.gpus_per_node:
        yield Problem(f"{key}.gpus_per_engine", f"a {what} engine of {m.gpus_per_engine} GPUs is wider than a "
                      f"{cfg.hardware.name} node of {cfg.hardware.gpus_per_node}; {what} engines run on one node",
                      f"set {key}.gpus_per_engine <= {cfg.hardware.gpus_per_node}", m.gpus_per_engine)
        return
    yield from _budget(cfg, key, m, what)


def _budget(cfg: RunConfig, key: str, m, what: str) -> Iterator[Problem]:
    """The served engines' GPUs: colocated, the rollout engines' GPUs (and their memory); else free GPUs within
    cluster.num_nodes."""
    r, hw = cfg.rollout, cfg.hardware
    need = m.num_engines * m.gpus_per_engine
    if m.colocate:
        have = len(engine_slots(cfg))
        if need > have:
            yield Problem(f"{key}.num_engines", f"{m.num_engines} colocated {what} engine(s) of "
                          f"{m.gpus_per_engine} GPU(s) need {need} GPUs; the rollout engines have {have}",
                          f"set {key}.num_engines <= {have // m.gpus_per_engine}, or {key}.colocate="
                          "false (GPUs of their own)", m.num_engines)
        if ENGINES[m.engine].memory == "static_pool":
            rollout_share = engine_fraction(cfg)[0] if ENGINES[r.engine].memory == "static_pool" else 0.0
            others = colocated_shares(cfg)
            total = rollout_share + sum(others.values())
            if total > MAX_SHARED_FRACTION:
                yield Problem(f"{key}.mem_fraction_static", f"a colocated {what} engine reserves "
                              f"{m.mem_fraction_static} of each GPU beside the rollout engine's {rollout_share} "
                              f"(rollout.mem_fraction_static)" + "".join(f", {k}'s {v}" for k, v in others.items()
                                                                         if not k.startswith(key))
                              + f": {total:.2f} > {MAX_SHARED_FRACTION}", f"lower {key}.mem_fraction_static or "
                              f"rollout.mem_fraction_static, or set {key}.colocate=false", m.mem_fraction_static)
        return
    placed = trainer_slots(cfg) + engine_slots(cfg) + reward_slots(cfg) + teacher_slots(cfg)
    needed = max(s.node for s in placed) + 1
    if needed > cfg.cluster.num_nodes:
        yield Problem(f"{key}.num_engines", f"the trainer, the rollout engines and {m.num_engines} {what} "
                      f"engine(s) of {m.gpus_per_engine} GPU(s) on GPUs of their own need {needed} node(s) of "
                      f"{hw.gpus_per_node} GPUs; the cluster has {cfg.cluster.num_nodes}",
                      f"set cluster.num_nodes={needed}, fewer {key}.num_engines, or {key}.colocate=true",
                      m.num_engines)


def colocated_shares(cfg: RunConfig) -> dict[str, float]:
    """The static-pool GPU shares of the served engines colocated with the rollout engines, by key."""
    served = []
    if use_reward_model(cfg):
        served.append(("reward.model", cfg.reward.model))
    if use_teacher_engines(cfg):
        served.append(("algo.distill.served", cfg.algo.distill.served))
    return {f"{k}.mem_fraction_static": m.mem_fraction_static for k, m in served
            if m.colocate and ENGINES[m.engine].memory == "static_pool"}
