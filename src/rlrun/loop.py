"""The RL loop, top to bottom. Everything it touches is built by rlrun.runner (a `Run`).

Per rollout step:
    prompts -> n samples each (client -> sglang-router -> engines) -> rewards -> dynamic sampling
    -> old/ref log-probs (when the algorithm needs them), critic values (ppo) -> advantages
    (+ returns) -> num_steps_per_rollout optimizer steps (actor, and the critic for ppo)
    -> weight sync to the engines (checksum verified) -> eval -> save -> metrics
With offload (colocated), the engines release their memory for the trainer's part and resume it
around the weight push; the trainer goes to host memory after the export (runner.Run.training).
"""
from __future__ import annotations

from rlrun.launch import steps
from rlrun.metrics import Timer
from rlrun.rollout.client import Sampling


def run(r) -> dict:
    """Run rollouts from the resume point to rollout.num_rollout; returns a summary."""
    cfg, plan = r.cfg, r.plan
    n = cfg.rollout.n_samples_per_prompt
    sampling = Sampling.from_config(cfg.rollout)
    # Old-policy log-probs differ from the live ones only after the first optimizer step of a
    # rollout, or when the reward itself needs them (KL in the reward).
    needs_old = plan.steps_per_rollout > 1 or cfg.algo.kl_coef != 0
    needs_ref = cfg.algo.use_kl_loss or cfg.algo.kl_coef != 0
    needs_values = cfg.algo.advantage_estimator == "ppo"  # GAE needs the critic's values
    start = r.restore()
    for rollout_id in range(start, cfg.rollout.num_rollout):
        r.check_stop()  # a SIGINT/SIGTERM whose exception was lost still stops the run here
        t = Timer()
        # 1-3. generate, score, keep the groups that carry signal
        with t("rollout"):
            samples, kept, gen = r.collect(rollout_id, sampling)
        metrics = {**steps.rollout_metrics(samples), **gen, "rollout/kept_samples": float(len(kept))}
        tokens = {"rollout": sum(len(s.response_tokens) for s in samples)}
        if kept and not cfg.debug.rollout_only:  # rollout_only: generate, score, record; no training
            batch = steps.to_train_batch(kept)
            tokens["train"] = batch.num_tokens  # every sample is trained on once per rollout
            # 4-7 on the trainer, ending with the weight sync (checksum verified) before the next
            # rollout; with offload the engines and the trainer swap GPU memory around it
            with r.training(version=rollout_id + 1, timer=t):
                # 4. log-probs for the importance ratio and the KL term, values for GAE
                with t("log_probs"):
                    if cfg.algo.use_rollout_logprobs:
                        batch = batch.with_(old_logp=batch.rollout_logp)
                    elif needs_old:
                        batch = batch.with_(old_logp=r.trainer.compute_log_probs(batch, "actor"))
                    if needs_ref:
                        batch = batch.with_(ref_logp=r.trainer.compute_log_probs(batch, "ref"))
                    if needs_values:
                        batch = batch.with_(values=r.trainer.compute_values(batch))
                # 5. advantages (ppo: and returns) over whole groups, 6. optimizer steps on consecutive slices
                batch = steps.add_advantages(cfg, batch, [s.reward for s in kept], n)
                with t("train"):
                    per_step = [r.trainer.train_step(batch.shard(k, plan.steps_per_rollout))
                                for k in range(plan.steps_per_rollout)]
                metrics.update(steps.mean_metrics(per_step))
        # 8. eval and 9. save on their intervals (and save once more at the very end)
        if cfg.eval.interval and (rollout_id + 1) % cfg.eval.interval == 0:
            with t("eval"):
                metrics.update(r.evaluate(rollout_id))
        last = rollout_id + 1 == cfg.rollout.num_rollout
        if last or (cfg.checkpoint.save_interval and (rollout_id + 1) % cfg.checkpoint.save_interval == 0):
            with t("save"):
                r.save(rollout_id)
        metrics.update(t.metrics(tokens))
        r.log(rollout_id, metrics)
    return r.summary()
