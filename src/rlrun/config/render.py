"""Human-readable plan output. Plain text here (fast, no dependencies); `rlrun plan` upgrades to rich
tables when rich is available and stdout is a terminal."""
from __future__ import annotations

from rlrun.config.plan import Plan


def summary_lines(plan: Plan) -> list[str]:
    mode = "colocated" if plan.colocate else "disaggregated"
    return [
        f"GPUs: {plan.trainer_gpus} trainer + {plan.rollout_gpus} rollout ({mode}) on {plan.num_nodes} node(s) "
        f"of {plan.gpus_per_node}",
        f"trainer: world {plan.world_size} = TP {plan.tp} x PP {plan.pp} x CP {plan.cp} x DP {plan.dp} (EP {plan.ep})",
        f"rollout: {plan.num_engines} engine(s) x {plan.gpus_per_engine} GPU(s)",
        f"batch: {plan.prompts_per_rollout} prompts x {plan.samples_per_rollout // plan.prompts_per_rollout} samples "
        f"= {plan.samples_per_rollout} = {plan.global_batch_size} x {plan.steps_per_rollout} "
        f"(global batch x optimizer steps per rollout); {plan.micro_batches_per_step} micro-batch(es) per step "
        f"per DP rank",
        f"steps: {plan.num_rollout} rollouts x {plan.steps_per_rollout} = {plan.total_steps} optimizer steps",
    ]


def placement_lines(plan: Plan) -> list[str]:
    by_gpu: dict[tuple[int, int], list[str]] = {}
    for s in plan.placement:
        by_gpu.setdefault((s.node, s.gpu), []).append(f"{s.role} {s.rank}")
    return [f"node {n} gpu {g}: {', '.join(v)}" for (n, g), v in sorted(by_gpu.items())]


def plan_text(plan: Plan) -> str:
    lines = summary_lines(plan) + ["placement:"] + ["  " + x for x in placement_lines(plan)]
    if plan.env:
        lines += ["env:"] + [f"  {k}={v}" for k, v in sorted(plan.env.items())]
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
