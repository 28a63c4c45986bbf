"""The phases both loops share: resume, the trainer's block, the end of a step."""
from __future__ import annotations

from contextlib import contextmanager

import torch

from rlrun.config.kinds import LOSS_TYPES, use_critic
from rlrun.loops import steps
from rlrun.parts import Parts


def resume(p: Parts) -> int:
    """Restore the newest checkpoint when resuming, bring the engines to the trainer's weights,
    open the metrics; returns the first rollout to run."""
    state = p.checkpoints.restore()
    start = 0 if state is None else state.next_rollout
    if state is not None:
        p.rollout.prompts.load_state_dict(state.data_state)
    # Fresh start: the engines loaded the trainer's init (verified, pushed only if they differ,
    # e.g. a bf16 export from the megatron backend). Resumed: the checkpoint's weights are pushed.
    p.weights.sync(version=start, only_if_stale=state is None)
    if p.plan.offload_train:
        p.trainer.offload()  # the first rollout's engines get the GPU to themselves
    p.metrics.open(start)
    p.invariants.resume(start)  # resume_trains: a resume that would train nothing stops here
    return start


def record(p: Parts, rollout_id: int, samples: list, kept: list) -> None:
    """The rollout's samples -> its records (logging.rollout_records), then the run invariants
    on what was generated and what will train (groups, staleness, rewards; rlrun.guard.invariants)."""
    p.metrics.record(rollout_id, samples, kept)
    p.invariants.samples(rollout_id, samples, kept)


def train(p: Parts, kept: list, version: int, t, push: bool = True) -> tuple[dict, int]:
    """Steps 4-7 on the trainer, ending with the weight sync to `version` (checksum verified;
    push=False: none this step); with offload the engines and the trainer swap GPU memory
    around it. Returns (the mean train metrics, trained tokens)."""
    cfg, plan = p.cfg, p.plan
    batch = steps.to_train_batch(kept, mask_offpolicy=cfg.rollout.mask_offpolicy_in_partial_rollout,
                                 routing_replay=cfg.rollout.routing_replay)
    with p.offload.training(version=version, timer=t, push=push), profiled(p, version - 1):
        # 4. log-probs for the importance ratio and the KL term, values for GAE. Old-policy
        # log-probs differ from the live ones only after the first optimizer step of a rollout,
        # or when the reward itself needs them (KL in the reward).
        with t("log_probs"):
            if cfg.algo.use_rollout_logprobs:
                batch = batch.with_(old_logp=batch.rollout_logp)
            elif plan.steps_per_rollout > 1 or cfg.algo.kl_coef != 0 or p.teacher is not None:
                batch = batch.with_(old_logp=p.trainer.compute_log_probs(batch, "actor"))
            # algo.distill: the teacher's log-probs, from the trainer's forward or the teacher engines' answers
            teacher = p.teacher.log_probs(batch) if p.teacher is not None else None
            if cfg.algo.use_kl_loss or cfg.algo.kl_coef != 0:
                batch = batch.with_(ref_logp=p.trainer.compute_log_probs(batch, "ref"))
            if use_critic(cfg):  # GAE needs the critic's values
                batch = batch.with_(values=p.trainer.compute_values(batch))
        # 5. advantages (ppo: and returns) over whole groups, 6. optimizer steps on consecutive slices
        if LOSS_TYPES[cfg.algo.loss_type].needs_advantages:
            final = cfg.algo.reward_post_process is not None  # its rewards replace the group normalisation
            rewards = [s.train_reward if final else s.reward for s in kept]
            batch = steps.add_advantages(cfg, batch, rewards, cfg.rollout.n_samples_per_prompt,
                                        [s.group_id for s in kept], teacher,  # each group over its members
                                        final_rewards=final)
        else:  # the loss reads no advantages (sft_loss; slime --disable-compute-advantages-and-returns)
            batch = batch.with_(advantages=[torch.zeros(int(m.numel())) for m in batch.loss_mask])
        p.invariants.batch(version - 1, batch.advantages)
        with t("train"):
            per_step = [p.trainer.train_step(batch.shard(k, plan.steps_per_rollout))
                        for k in range(plan.steps_per_rollout)]
        metrics = steps.mean_metrics(per_step)
        if teacher is not None:
            metrics.update(steps.distill_metrics(batch, teacher))
        p.invariants.trained(version - 1, metrics)  # a stop here comes before the weight push and the save
    return metrics, batch.num_tokens


@contextmanager
def profiled(p: Parts, rollout_id: int):
    """debug.profile_steps: the trainer's work of this rollout (not the weight sync) under
    torch.profiler on every rank, a chrome trace per rank (rlrun.train.profile)."""
    if rollout_id not in p.cfg.debug.profile_steps:
        yield
        return
    p.trainer.start_profile()
    yield
    paths = p.trainer.stop_profile(rollout_id)
    print(f"[rlrun] trainer profile of rollout {rollout_id}: {', '.join(paths)}", flush=True)


def end_step(p: Parts, rollout_id: int, metrics: dict, t, tokens: dict, data_state: dict) -> None:
    """8. eval and 9. save on their intervals (and save once more at the very end), then the row.
    data_state: the prompt iterator's state after this rollout's prompts (what a resume draws next)."""
    cfg = p.cfg
    if cfg.eval.interval and (rollout_id + 1) % cfg.eval.interval == 0:
        with t("eval"):
            metrics.update(p.evaluator.evaluate(rollout_id))
    last = rollout_id + 1 == cfg.rollout.num_rollout
    if last or (cfg.checkpoint.save_interval and (rollout_id + 1) % cfg.checkpoint.save_interval == 0):
        with t("save"):
            p.checkpoints.save(rollout_id, data_state)
    metrics.update(t.metrics(tokens))
    p.metrics.log(rollout_id, metrics)


def summary(p: Parts) -> dict:
    p.invariants.end()
    return p.metrics.summary(p.checkpoints.latest())
