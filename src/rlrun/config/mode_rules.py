"""Rules of the training modes beside plain RL (docs/algorithms.md "SFT", "On-policy distillation"): settings a mode
cannot use are refused, never ignored."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import BACKENDS, ENGINES, ESTIMATORS, LOSS_TYPES, resolve, use_critic
from rlrun.config.params import lora_saved_modules, lora_saves, lora_shapes
from rlrun.config.registry import RULES
from rlrun.config.schema import RunConfig


@RULES
def dataset_loss(cfg: RunConfig) -> Iterator[Problem]:
    """A loss that trains on the data set (sft_loss): no engines, rewards or advantages, so every setting that
    only shapes those would be ignored."""
    a, r, d = cfg.algo, cfg.rollout, cfg.data
    kind = LOSS_TYPES[a.loss_type]
    if kind.needs_rollout:
        return
    mode = f"algo.loss_type={a.loss_type} trains on the data set's responses without engines"
    fix = "drop it (algo=sft), or train with RL (algo=grpo)"
    if r.n_samples_per_prompt != 1:
        yield Problem("rollout.n_samples_per_prompt", f"{mode}: each data row is one sample, so {r.n_samples_per_prompt} "
                      "samples per prompt would train every row that many times in one step",
                      "set rollout.n_samples_per_prompt=1 (algo=sft does)", r.n_samples_per_prompt)
    ignored = [("algo.use_kl_loss", a.use_kl_loss, False), ("algo.kl_coef", a.kl_coef, 0.0),
               ("algo.entropy_coef", a.entropy_coef, 0.0), ("algo.use_tis", a.use_tis, False),
               ("algo.use_opsm", a.use_opsm, False), ("algo.normalize_advantages", a.normalize_advantages, False),
               ("algo.use_rollout_logprobs", a.use_rollout_logprobs, False),
               ("train.async_train", cfg.train.async_train, False), ("debug.rollout_only", cfg.debug.rollout_only, False),
               ("eval.interval", cfg.eval.interval, None), ("rollout.generate_fn", r.generate_fn, None),
               ("rollout.dynamic_sampling", r.dynamic_sampling, None), ("data.source", d.source, None)]
    for key, value, off in ignored:
        if value != off:
            yield Problem(key, f"{mode}; it applies to generated samples, rewards or the policy loss only and "
                          "would be ignored", fix if off is None or off is False else f"set {key}={off}", value)
    if use_critic(cfg):
        yield Problem("algo.advantage_estimator", f"{mode}; {a.advantage_estimator} trains a critic on returns, "
                      "which an SFT run has none of", "use algo=sft (advantage_estimator grpo is unused)",
                      a.advantage_estimator)
    if d.label_key is None and not d.apply_chat_template:
        yield Problem("data.label_key", f"{mode}: a row's response is its label (data.label_key) or the assistant "
                      "messages of a conversation (data.apply_chat_template=true); with neither there is nothing "
                      "to train on", "set data.label_key to the response's key, or data.input_key to a list of "
                      "messages with data.apply_chat_template=true", None)


@RULES
def distillation(cfg: RunConfig) -> Iterator[Problem]:
    """algo.distill (on-policy distillation): a teacher the trainer can run, and nothing set that it would ignore."""
    a, d = cfg.algo, cfg.algo.distill
    if d.teacher is None:
        defaults = {"coef": 1.0, "where": "trainer", "reward": "add"}
        for key, off in defaults.items():
            if getattr(d, key) != off:
                yield Problem(f"algo.distill.{key}", "is set but algo.distill.teacher is null, so nothing is distilled "
                              "and it would be ignored", f"set algo.distill.teacher to the teacher's HF dir, or drop "
                              f"algo.distill.{key}", getattr(d, key))
        return
    if not LOSS_TYPES[a.loss_type].needs_rollout:
        yield Problem("algo.distill.teacher", f"on-policy distillation scores the student's own samples; "
                      f"algo.loss_type={a.loss_type} generates none", "drop algo.distill.teacher, or use "
                      "algo.loss_type=policy_loss", d.teacher)
    if d.where == "trainer" and not BACKENDS[cfg.train.backend].teacher:
        can = [b for b, spec in BACKENDS.items() if spec.teacher]
        yield Problem("algo.distill.where", f"the teacher's forward on the trainer ranks is built by the "
                      f"{' and '.join(can)} backend; train.backend is {cfg.train.backend}",
                      f"set train.backend={' or '.join(can)}", d.where)
    if d.coef == 0:
        yield Problem("algo.distill.coef", "is 0: the teacher would run and change nothing",
                      "set algo.distill.coef > 0 (slime's default 1.0), or algo.distill.teacher=null", d.coef)
    if d.reward == "replace" and not ESTIMATORS[a.advantage_estimator].group_normalised:
        yield Problem("algo.distill.reward", f"replace sets every reward to 0, which leaves a 0 reward advantage only "
                      f"for group-normalised estimators; {a.advantage_estimator} would still see the KL and values",
                      "use a group-normalised estimator (algo=grpo), or algo.distill.reward=add", d.reward)


@RULES
def lora(cfg: RunConfig) -> Iterator[Problem]:
    """model.lora: a backend that trains an adapter, an engine that serves it, layers it can target."""
    lo, m = cfg.model.lora, cfg.model
    if lo.rank == 0:
        defaults = {"alpha": 16.0, "dropout": 0.0,
                    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                    "modules_to_save": []}
        for key, off in defaults.items():
            if getattr(lo, key) != off:
                yield Problem(f"model.lora.{key}", "is set but model.lora.rank is 0 (full fine-tuning), so it would "
                              "be ignored", f"set model.lora.rank > 0 (8 or 16 are usual), or drop model.lora.{key}",
                              getattr(lo, key))
        return
    if not BACKENDS[cfg.train.backend].lora:
        can = [b for b, spec in BACKENDS.items() if spec.lora]
        yield Problem("model.lora.rank", f"the {cfg.train.backend} backend trains no LoRA adapter yet (the route is "
                      f"in docs/algorithms.md \"LoRA\"); {' and '.join(can)} does", f"set train.backend="
                      f"{' or '.join(can)}, or model.lora.rank=0", lo.rank)
    elif BACKENDS[cfg.train.backend].lora_check:
        yield from resolve(BACKENDS[cfg.train.backend].lora_check)(cfg)
    if not ENGINES[cfg.rollout.engine].lora and LOSS_TYPES[cfg.algo.loss_type].needs_rollout:
        can = [e for e, spec in ENGINES.items() if spec.lora]
        yield Problem("rollout.engine", f"a LoRA run's weight sync to {cfg.rollout.engine} engines is not built yet "
                      f"(docs/algorithms.md \"LoRA\"); {' and '.join(can)} takes the merged weights",
                      f"set rollout.engine={' or '.join(can)}, or model.lora.rank=0", cfg.rollout.engine)
    if m.moe is not None or m.mla is not None:
        yield Problem("model.lora.rank", "LoRA targets the dense attention and MLP layers; this model has "
                      + ("experts" if m.moe is not None else "multi-latent attention"), "model.lora.rank=0", lo.rank)
    known = lora_shapes(m)
    for t in lo.target_modules:
        if t not in known:
            yield Problem("model.lora.target_modules", f"{t!r} is not a linear layer of {m.family} that LoRA can "
                          f"target", f"use some of {', '.join(known)}", lo.target_modules)
    saved = lora_saved_modules(m)
    for t in lo.modules_to_save:  # peft matches a module whose name ends with t; none: it would train nothing
        if t in known or not any(lora_saves(name, t) for name in saved):
            yield Problem("model.lora.modules_to_save", f"{t!r} names no module of {m.family} to train whole"
                          + (" (it is a LoRA target)" if t in known else ""), f"use some of "
                          f"{', '.join(sorted({n.rsplit('.', 1)[-1] for n in saved}))} (or a longer suffix such as "
                          "model.norm)", lo.modules_to_save)
    if use_critic(cfg):
        yield Problem("model.lora.rank", f"{cfg.algo.advantage_estimator}'s critic would train in full beside the "
                      "adapter (and the memory estimate counts it as an adapter)", "use a critic-free algo "
                      "(algo=grpo), or model.lora.rank=0", lo.rank)
