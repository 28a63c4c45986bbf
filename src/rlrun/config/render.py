"""Human-readable plan output: rich tables for `rlrun plan` (rich is imported only here, so the JSON path
and `rlrun validate` stay light) and a few plain lines for `rlrun run`."""
from __future__ import annotations

import sys
from typing import Any

from rlrun.config.plan import Plan


def summary_lines(plan: Plan) -> list[str]:
    mode = "colocated" if plan.colocate else "disaggregated"
    n = plan.samples_per_rollout // plan.prompts_per_rollout
    return [
        f"GPUs: {plan.trainer_gpus} trainer + {plan.rollout_gpus} rollout ({mode}) on {plan.num_nodes} node(s) "
        f"of {plan.gpus_per_node}",
        f"trainer: world {plan.world_size} = TP {plan.tp} x PP {plan.pp} x CP {plan.cp} x DP {plan.dp} (EP {plan.ep})",
        f"rollout: {plan.num_engines} engine(s) x {plan.gpus_per_engine} GPU(s)"
        + (f" on {plan.nodes_per_engine} nodes each (one server process per node)" if plan.nodes_per_engine > 1 else "")
        + f"; weight sync: {plan.weight_sync} "
        f"(buckets of {plan.weight_sync_bucket_mb} MB{'; ' + plan.weight_sync_route if plan.weight_sync_route else ''})"
        + (f"; engine pool {plan.engine_fraction:g} of a GPU ({plan.engine_fraction_why})" if plan.engine_fraction_why
           else ""),
        f"batch: {plan.prompts_per_rollout} prompts x {n} samples = {plan.samples_per_rollout} = "
        f"{plan.global_batch_size} x {plan.steps_per_rollout} (global batch x optimizer steps per rollout)",
        f"steps: {plan.num_rollout} rollouts x {plan.steps_per_rollout} = {plan.total_steps} optimizer steps",
        f"offload: trainer {'offloaded (pinned host memory, async copies)' if plan.offload_train else 'resident'}, "
        "engines "
        + (("release only their KV cache" if not plan.offload_train else "release weights + KV cache")
           + " for training" if plan.offload_rollout and plan.colocate else "keep their memory")
        + (f" ({plan.offload_why})" if plan.offload_why else ""),
        f"params: {_b(plan.params_total)} total, {_b(plan.params_active)} active; memory peak "
        f"{_gib(plan.memory_gib.get('peak', 0))} of {_gib(plan.memory_gib.get('available', 0))} per GPU "
        f"({'fits' if plan.fits else 'DOES NOT FIT'})",
    ]


def cost_line(plan: Plan) -> str:
    """One line of the prediction (rlrun.config.cost): step, run, GPU-hours, and its basis."""
    c = plan.cost
    if "step_s" not in c:
        return f"predicted: none ({c.get('note', 'no cost model')})"
    tag = "measured constants" if c["basis"] == "measured" else "ESTIMATE"
    return (f"predicted: {c['step_s']:.2f} s per rollout step, {plan.num_rollout} rollouts in {_hours(c['run_h'])} "
            f"= {c['gpu_hours']:.3g} GPU-hours on {c['gpus']} GPU(s) [{tag}: {c['hardware']}]")


def _hours(h: float) -> str:
    return f"{h:.1f} h" if h >= 1 else f"{h * 60:.1f} min"


def _cost_rows(plan: Plan) -> list[list[Any]]:
    c = plan.cost
    per = {"eval": "eval.interval", "save": "checkpoint.save_interval"}
    rows = []
    for ph, s in c["phases_s"].items():
        if ph in c.get("events_s", {}):
            rows.append([ph, f"{s:.3f}", f"{c['events_s'][ph]:.2f} s each, amortised over {per[ph]}"])
        elif s:
            rows.append([ph, f"{s:.3f}", ""])
    rows.append(["driver overhead", f"{c['overhead_s']:.3f}", ""])
    if "async" in c:
        a = c["async"]
        rows.append(["step (async)", f"{c['step_s']:.3f}", f"max(producer {a['producer_s']:.2f}, trainer "
                     f"{a['trainer_s']:.2f}); bubble {a['bubble_s']:.2f} s ({a['waits']} wait)"])
    else:
        rows.append(["step", f"{c['step_s']:.3f}", "sum of the phases (sync)"])
    g = c["generation"]
    kv = f", KV {g['kv_sequences']:,} sequences" if g.get("kv_sequences") is not None else ""
    rows.append(["generation", "", f"{g['requests_per_engine']} requests per engine at concurrency {g['concurrency']}{kv}, "
                 f"~{g['decode_steps']:.0f} decode steps, {g['response_tokens']:.0f} response tokens mean"])
    return rows


def _gib(x: float) -> str:
    return f"{x:.1f} GiB" if x >= 1 else f"{x * 1024:.1f} MiB"


def _b(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def _table(title: str, columns: list[str], rows: list[list[Any]]):
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_header=True, header_style="bold")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


def _memory_rows(plan: Plan) -> list[list[Any]]:
    m = plan.memory
    g = lambda v: f"{v:.2f}"  # noqa: E731
    return [
        ["trainer", "weights / grads / optimizer / activations",
         f"{g(m['trainer_weights'])} / {g(m['trainer_grads'])} / {g(m['trainer_optimizer'])} / "
         f"{g(m['trainer_activations'])} (+ {g(m.get('trainer_overhead', 0.0))} runtime)", g(m["trainer_total"])],
        ["engine", f"weights / KV cache ({m['kv_tokens']:,} tokens, {m['kv_sequences']:,} sequences)",
         f"{g(m['engine_weights'])} / {g(m['engine_kv_cache'])}", g(m["engine_total"])],
        ["per GPU", "peak (offload train {} / rollout {})".format(plan.offload_train, plan.offload_rollout),
         f"of {g(m['available'])} available", f"{g(m['peak'])} {'fits' if plan.fits else 'DOES NOT FIT'}"],
    ]


def print_plan(plan: Plan) -> None:
    from rich.console import Console

    console = Console() if sys.stdout.isatty() else Console(width=120)
    if plan.choices:
        print("groups: " + " ".join(f"{g}={c}" for g, c in plan.choices.items() if c is not None))
    print("\n".join(summary_lines(plan)[:-1]))  # plain print: one line each, easy to grep
    batch = [["prompts per rollout", plan.prompts_per_rollout],
             ["samples per rollout", plan.samples_per_rollout],
             ["global batch (samples per optimizer step)", plan.global_batch_size],
             ["optimizer steps per rollout", plan.steps_per_rollout],
             ["samples per DP rank per step", plan.samples_per_dp_rank],
             ["micro-batches per step per DP rank" + (" (<=, dynamic)" if plan.dynamic_batching else ""),
              plan.micro_batches_per_step],
             ["rollouts / optimizer steps / samples", f"{plan.num_rollout} / {plan.total_steps} / {plan.total_samples}"],
             ["params total / active", f"{_b(plan.params_total)} / {_b(plan.params_active)}"],
             ["weight sync (transport, bucket)", f"{plan.weight_sync}, {plan.weight_sync_bucket_mb} MB"]]
    console.print(_table("batch math", ["", "value"], batch))
    ranks = [[r.rank, r.node, r.gpu, r.tp, r.cp, r.dp, r.pp, r.ep] for r in plan.ranks]
    console.print(_table("trainer ranks (megatron order tp-cp-ep-dp-pp)",
                         ["rank", "node", "gpu", "tp", "cp", "dp", "pp", "ep"], ranks))
    by_gpu: dict[tuple[int, int], list[str]] = {}
    for s in plan.placement:
        by_gpu.setdefault((s.node, s.gpu), []).append(f"{s.role} {s.rank}")
    console.print(_table(f"placement ({'colocated' if plan.colocate else 'disaggregated'})",
                         ["node", "gpu", "runs"], [[n, g, ", ".join(v)] for (n, g), v in sorted(by_gpu.items())]))
    console.print(_table("memory per GPU (GiB, estimate)", ["role", "what", "GiB", "total"], _memory_rows(plan)))
    if plan.backend_config:
        console.print(_table("train.megatron (megatron-core fields, passed unchanged)", ["field", "value"],
                             [[k, repr(v)] for k, v in sorted(plan.backend_config.items())]))
    if "step_s" in plan.cost:
        c = plan.cost
        console.print(_table(f"predicted time per rollout step (s; {'measured constants' if c['basis'] == 'measured' else 'ESTIMATE'}"
                             f" for {c['hardware']})", ["phase", "s", ""], _cost_rows(plan)))
        print(cost_line(plan))
        print(f"basis: {c['note']}")
        print("assumed: " + "; ".join(c["assumptions"]))
        advice = c.get("advice") or []
        best = advice[0] if advice else None
        if best and not best["current"] and best["gain"] and best["gain"] > 1.05:
            print(f"advice: {best['layout']}: {best['step_s']:.2f} s per step, {best['gain']:.2f}x faster (predicted)")
        elif best:
            print(f"advice: the current layout is the fastest of {len(advice)} splits of these GPUs (predicted)")
    else:
        print(cost_line(plan))
    if plan.env:
        console.print(_table("env for actors", ["var", "value"], sorted(plan.env.items())))
    for n in plan.notes:
        console.print(f"note: {n}", highlight=False)

