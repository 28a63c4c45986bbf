"""Build everything a run needs from (RunConfig, Plan, run dir), run the loop, tear it all down.

    Ray cluster (embedded or joined) -> resource check -> placement group -> trainer ranks
    -> engine init dir -> engines (Ray actors) -> the router -> reward engines and their router (reward.model)
    -> the parts (rlrun.parts)
    -> the loop of train.async_train (rlrun.loops: sync | async) -> plot

Teardown runs on success, on errors and on SIGINT/SIGTERM (turned into exceptions here), in
reverse order, so no engine, router or embedded Ray process outlives the run.
"""
from __future__ import annotations

import signal
from contextlib import ExitStack
from pathlib import Path

from rlrun import stopmsg
from rlrun.guard.invariants import Invariants
from rlrun.guard.watchdog import Watchdog
from rlrun.launch import faults
from rlrun.loops import loop_for
from rlrun.parts import Parts
from rlrun.config.kinds import TEACHERS, needs_rollout, resolve, use_teacher
from rlrun.parts.checkpoints import Checkpoints
from rlrun.parts.no_engines import NoEngines
from rlrun.parts.sft_data import SftData
from rlrun.parts.evaluator import Evaluator
from rlrun.parts.offload import Offload
from rlrun.parts.reward_engines import RewardEngines, start_served
from rlrun.parts.rollout_side import MAX_DRAWS, RolloutSide  # noqa: F401 - public names
from rlrun.parts.run_metrics import RunMetrics
from rlrun.data.tokenizer import tokenizer_for  # noqa: F401  (rlrun.runner.tokenizer_for)
from rlrun.parts.weight_sync import WEIGHT_SYNC_DIR, WeightSync, WeightSyncError  # noqa: F401

ENGINE_INIT_DIR = "engine_init"


ENGINE_INIT_FP8_DIR = "engine_init_fp8"  # rollout.fp8 with a bf16 checkpoint.hf: its FP8 copy


def write_engine_init_dir(cfg, tokenizer, out: Path) -> str:
    """An HF dir the engines start from: checkpoint.hf itself, or the random init the trainer
    builds too (same seed), with the tokenizer's special-token ids in its config. With rollout.fp8 the engines
    start from block-wise FP8 weights (rlrun.rollout.fp8.write_fp8_dir), so that every push of FP8 weights and
    their scales lands in parameters of that dtype and shape: checkpoint.hf's FP8 copy beside `out`
    (ENGINE_INIT_FP8_DIR), or the random init converted in place. On a GPU the random init is written in bf16, the
    dtype the trainer holds and the hf engine serves, so that SGLang's dtype=auto serves bf16 too (a float32 config
    makes it pick float16). (checkpoint.hf itself is bf16: the trainer reads it, and the preflight refuses a
    quantized one, rlrun.launch.preflight.quantized_checkpoint.)"""
    if cfg.checkpoint.hf:
        if not cfg.rollout.fp8:
            return cfg.checkpoint.hf
        from rlrun.rollout.fp8 import write_fp8_dir

        return write_fp8_dir(cfg.checkpoint.hf, Path(out).parent / ENGINE_INIT_FP8_DIR)
    import torch
    from transformers.utils import logging as hf_logging

    from rlrun.train.hf_model import build_causal_lm

    hf_logging.disable_progress_bar()  # the run's own progress bar is the only one on screen
    model = build_causal_lm(cfg.model, None, cfg.run.seed)
    if cfg.hardware.vendor != "cpu":  # GPU engines serve bf16, as the trainer holds it: a float32 config would make
        model = model.to(torch.bfloat16)  # SGLang's dtype=auto pick float16, rounding differently from the trainer
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.config, name, getattr(tokenizer, name))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if cfg.rollout.fp8:
        from rlrun.rollout.fp8 import write_fp8_dir

        write_fp8_dir(out, out)
    return str(out)


def start_trainer(cfg, plan, run_dir: Path, stack: ExitStack, wait: bool = True):
    """Ray (embedded, or the caller's / cluster.address), the placement group and the trainer ranks,
    each torn down by `stack`; returns (placement, actor env, TrainGroup). rlrun replay uses only this.
    wait=False: the ranks may still be building (TrainGroup.ready waits)."""
    import ray  # fail here, before any work, if the runtime stack is missing

    from rlrun.launch import cluster
    from rlrun.launch.env import actor_env
    from rlrun.launch.placement import Placement
    from rlrun.launch.train_group import TrainGroup

    vendor = cfg.hardware.vendor
    callers = ray.is_initialized()  # a caller's connection (a test, a notebook) stays theirs
    ray_cluster = cluster.start(cfg.cluster.address, vendor, plan)
    if not callers:
        stack.callback(ray_cluster.shutdown)
    cluster.check_resources(plan, vendor, cluster.alive_nodes())
    cluster.preflight_on_head(cfg, plan)  # remote cluster: its paths, data and disk, before placement
    placement = Placement(plan, vendor)
    stack.callback(placement.remove)
    env = actor_env(vendor, cfg.hardware.env, plan.env)
    trainer = TrainGroup(cfg, plan, placement, env, str(run_dir), wait=wait)  # run_dir: profiles, OOM snapshots
    stack.callback(trainer.shutdown)
    return placement, env, trainer


def plan_gpus(role: str, plan) -> set[tuple[int, int]]:
    """The (node, GPU) slots the plan gives `role`."""
    return {(s.node, s.gpu) for s in plan.placement if s.role == role}


def build(cfg, plan, run_dir: Path, stack: ExitStack) -> Parts:
    """Every part of the run (rlrun.parts), each torn down by `stack` in reverse order."""
    run_dir = Path(run_dir)
    if not needs_rollout(cfg):
        return build_trainer_only(cfg, plan, run_dir, stack)
    # Engines on GPUs of their own start while the trainer ranks build (both take a minute or more at scale); an
    # engine sharing a rank's GPU starts after it, as SGLang sizes its pool by the memory it finds free.
    overlap = not plan_gpus("trainer", plan) & plan_gpus("engine", plan)
    placement, env, trainer = start_trainer(cfg, plan, run_dir, stack, wait=not overlap)
    tokenizer = tokenizer_for(cfg)
    model_dir = write_engine_init_dir(cfg, tokenizer, run_dir / ENGINE_INIT_DIR)
    # a rank's failed build ends the engines' start (once the ranks are built, the check has nothing to do)
    rollout = RolloutSide.start(cfg, plan, placement, env, model_dir, tokenizer, run_dir, stack, watch=trainer.check)
    trainer.ready()
    if plan.reward_engines:  # reward.model: a reward model served as engines judges the samples (rm_type reward_model)
        rollout.judge = RewardEngines.start(cfg, plan, placement, env, run_dir, stack).judge
    teacher = None
    if use_teacher(cfg):  # algo.distill: the teacher's log-probs from where algo.distill.where runs it
        def serve(role, m, checkpoint, count):
            return start_served(cfg, plan, placement, env, run_dir, stack, role, m, checkpoint, count).url
        teacher = resolve(TEACHERS[cfg.algo.distill.where].part).from_parts(cfg, plan, trainer, serve)
    invariants = Invariants(cfg, run_dir)
    weights = WeightSync(cfg, plan, run_dir, trainer, rollout.engines, rollout.versions, invariants)
    metrics = RunMetrics(cfg, run_dir, extra=lambda: {**weights.pop_metrics(), **invariants.pop_metrics(),
                                                      "rollout/engine_restarts": float(rollout.engines.restarts)})
    stack.callback(metrics.close)
    return Parts(cfg=cfg, plan=plan, rollout=rollout, trainer=trainer, weights=weights,
                 offload=Offload(cfg, plan, trainer, rollout.engines, weights),
                 checkpoints=Checkpoints(cfg, run_dir, trainer), evaluator=Evaluator(cfg, rollout), metrics=metrics,
                 invariants=invariants, teacher=teacher)


def build_trainer_only(cfg, plan, run_dir: Path, stack: ExitStack) -> Parts:
    """A run whose loss trains on a dataset (algo.loss_type=sft_loss, slime --debug-train-only): the trainer
    ranks, the data as the rollout side (SftData), checkpoints (with the tokenizer beside the HF weights, so that
    checkpoint.hf can start an RL run from them) and metrics; no engines, no router, no weight sync."""
    _, _, trainer = start_trainer(cfg, plan, run_dir, stack)
    tokenizer = tokenizer_for(cfg)
    none = NoEngines()
    invariants = Invariants(cfg, run_dir)
    metrics = RunMetrics(cfg, run_dir, extra=invariants.pop_metrics)
    stack.callback(metrics.close)
    return Parts(cfg=cfg, plan=plan, rollout=SftData(cfg, tokenizer, run_dir), trainer=trainer, weights=none,
                 offload=none, checkpoints=Checkpoints(cfg, run_dir, trainer, tokenizer=tokenizer), evaluator=none,
                 metrics=metrics, invariants=invariants)


class StopRequest:
    """SIGINT / SIGTERM: raised at once as SystemExit(128 + signal), and remembered. An exception
    raised while Python runs a finalizer or a weakref callback is printed and dropped, so the loop
    also checks between rollouts, and a run that finishes after a lost stop request still exits
    non-zero (seen once in CI: a SIGINTed run went on to its last step and exited 0)."""

    def __init__(self):
        self.signum: int | None = None

    def handler(self, signum, frame):
        self.signum = signum
        raise SystemExit(128 + signum)

    def check(self) -> None:
        if self.signum is not None:
            raise SystemExit(128 + self.signum)


def run(cfg, plan, run_dir) -> dict:
    """Run the job; returns a summary (run dir, steps, first/last mean reward, checkpoint)."""
    stop = StopRequest()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with ExitStack() as stack:
            parts = build(cfg, plan, Path(run_dir), stack)
            parts.check_stop = stop.check
            engines = needs_rollout(cfg)
            lost = {"tolerate": faults.engines_only(parts.rollout.placement)} if engines else {}
            stack.enter_context(faults.name_lost_nodes(parts.checkpoints.save_dir, **lost))  # name it + last ckpt
            watchdog = stack.enter_context(Watchdog(cfg, run_dir, parts))  # a phase past its bound: diagnosis.json
            if engines:  # an engine past rollout.max_engine_restarts stops the run
                parts.rollout.engines.on_fatal = watchdog.fail
            summary = loop_for(cfg)(parts)
            stop.check()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        stopmsg.report(stop.signum, cfg, run_dir)  # stopped: where the checkpoint is, how to resume
    if summary["steps"]:
        print(f"[rlrun] done: {summary['steps']} steps, reward {summary['reward_first']:.3f} (first "
              f"{summary['window']}) -> {summary['reward_last']:.3f} (last {summary['window']}); run dir "
              f"{summary['run_dir']}", flush=True)
    return summary
