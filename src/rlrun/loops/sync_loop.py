"""The synchronous RL loop, top to bottom, over the parts rlrun.runner builds (rlrun.parts).

Per rollout step:
    prompts -> n samples each (generate function -> client -> router (rollout.router.kind) -> engines) -> rewards
    -> dynamic sampling -> old/ref log-probs (when the algorithm needs them), critic values (ppo)
    -> advantages (+ returns) -> num_steps_per_rollout optimizer steps (actor, and the critic for ppo)
    -> weight sync to the engines (checksum verified) -> eval -> save -> metrics
With offload (colocated), the engines release their memory for the trainer's part and resume it
around the weight push; the trainer goes to host memory after the export (rlrun.parts.offload).
The asynchronous loop is rlrun.loops.async_loop; both share rlrun.loops.phases.
"""
from __future__ import annotations

from rlrun.loops import phases
from rlrun.metrics import Timer
from rlrun.parts import Parts
from rlrun.parts.sampling import rollout_metrics
from rlrun.rollout.client import Sampling


def run(p: Parts) -> dict:
    """Run rollouts from the resume point to rollout.num_rollout; returns a summary."""
    sampling = Sampling.from_config(p.cfg.rollout)
    start = phases.resume(p)
    for rollout_id in range(start, p.cfg.rollout.num_rollout):
        p.check_stop()  # a SIGINT/SIGTERM whose exception was lost still stops the run here
        t = Timer()
        # 1-3. generate, score, keep the groups that carry signal
        with t("rollout"), p.rollout.profiling(rollout_id):
            samples, kept, gen = p.rollout.collect(rollout_id, sampling)
        phases.record(p, rollout_id, samples, kept)  # logging.rollout_records, run invariants
        metrics = {**rollout_metrics(samples), **gen, "rollout/kept_samples": float(len(kept))}
        tokens = {"rollout": sum(len(s.response_tokens) for s in samples)}
        if kept and not p.cfg.debug.rollout_only:  # 4-7 on the trainer, ending with the weight sync
            trained, tokens["train"] = phases.train(p, kept, version=rollout_id + 1, t=t)
            metrics.update(trained)
        phases.end_step(p, rollout_id, metrics, t, tokens, p.rollout.prompts.state_dict())
    return phases.summary(p)
