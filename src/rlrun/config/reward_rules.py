"""Rules of the reward engines (reward.model, docs/rewards.md "Reward engines"): a judge model served by an engine
kind that can judge, placed where there are GPUs for it, asked with templates and a parser that can work; every
reward.model setting a run would ignore is refused."""
from __future__ import annotations

import re
import string
from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import ENGINES, REWARDS, needs_rollout
from rlrun.config.memory import engine_fraction
from rlrun.config.plan import engine_slots, reward_slots, trainer_slots
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
    kind = ENGINES[m.engine]
    if not kind.judge:
        can = [e for e, spec in ENGINES.items() if spec.judge]
        yield Problem("reward.model.engine", f"the {m.engine} engine does not serve a judge (/generate's "
                      "token_ids_logprob and text generation)", f"set reward.model.engine={' or '.join(can)}", m.engine)
    if kind.needs_gpu and cfg.hardware.vendor == "cpu":
        cpu = [e for e, spec in ENGINES.items() if not spec.needs_gpu and spec.judge]
        yield Problem("reward.model.engine", f"{m.engine} needs GPUs; hardware is cpu",
                      f"set reward.model.engine={' or '.join(cpu)} or pick GPU hardware", m.engine)
    if kind.max_gpus_per_engine is not None and m.gpus_per_engine > kind.max_gpus_per_engine:
        wide = [e for e, spec in ENGINES.items() if spec.judge and (spec.max_gpus_per_engine or m.gpus_per_engine)
                >= m.gpus_per_engine]
        yield Problem("reward.model.gpus_per_engine", f"the {m.engine} engine runs on {kind.max_gpus_per_engine} "
                      f"device(s), got {m.gpus_per_engine}", f"set reward.model.gpus_per_engine="
                      f"{kind.max_gpus_per_engine}" + "".join(f" or reward.model.engine={e}" for e in wide),
                      m.gpus_per_engine)
    if m.gpus_per_engine > cfg.hardware.gpus_per_node:
        yield Problem("reward.model.gpus_per_engine", f"a reward engine of {m.gpus_per_engine} GPUs is wider than a "
                      f"{cfg.hardware.name} node of {cfg.hardware.gpus_per_node}; reward engines run on one node",
                      f"set reward.model.gpus_per_engine <= {cfg.hardware.gpus_per_node}", m.gpus_per_engine)
        return
    yield from _budget(cfg)
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


def _budget(cfg: RunConfig) -> Iterator[Problem]:
    """The reward engines' GPUs: colocated, the rollout engines' GPUs (and their memory); else free GPUs within
    cluster.num_nodes."""
    m, r, hw = cfg.reward.model, cfg.rollout, cfg.hardware
    need = m.num_engines * m.gpus_per_engine
    if m.colocate:
        have = len(engine_slots(cfg))
        if need > have:
            yield Problem("reward.model.num_engines", f"{m.num_engines} colocated reward engine(s) of "
                          f"{m.gpus_per_engine} GPU(s) need {need} GPUs; the rollout engines have {have}",
                          f"set reward.model.num_engines <= {have // m.gpus_per_engine}, or reward.model.colocate="
                          "false (GPUs of their own)", m.num_engines)
        if ENGINES[m.engine].memory == "static_pool":
            rollout_share = engine_fraction(cfg)[0] if ENGINES[r.engine].memory == "static_pool" else 0.0
            if rollout_share + m.mem_fraction_static > MAX_SHARED_FRACTION:
                yield Problem("reward.model.mem_fraction_static", f"a colocated reward engine reserves "
                              f"{m.mem_fraction_static} of each GPU beside the rollout engine's {rollout_share} "
                              f"(rollout.mem_fraction_static): {rollout_share + m.mem_fraction_static:.2f} > "
                              f"{MAX_SHARED_FRACTION}", "lower reward.model.mem_fraction_static or "
                              "rollout.mem_fraction_static, or set reward.model.colocate=false", m.mem_fraction_static)
        return
    slots = trainer_slots(cfg) + engine_slots(cfg) + reward_slots(cfg)
    needed = max(s.node for s in slots) + 1
    if needed > cfg.cluster.num_nodes:
        yield Problem("reward.model.num_engines", f"the trainer, the rollout engines and {m.num_engines} reward "
                      f"engine(s) of {m.gpus_per_engine} GPU(s) on GPUs of their own need {needed} node(s) of "
                      f"{hw.gpus_per_node} GPUs; the cluster has {cfg.cluster.num_nodes}",
                      f"set cluster.num_nodes={needed}, fewer reward.model.num_engines, or reward.model.colocate=true",
                      m.num_engines)

