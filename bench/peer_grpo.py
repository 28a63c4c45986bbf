"""The same GRPO job in rlrun and in TRL's GRPOTrainer (trl 1.16.0), one process: per-phase tables and the ratio.

    python bench/peer_grpo.py                               # issue 33's job on one GPU: random-init Qwen3-0.6B,
                                                            # 16 prompts x 8 samples, 256 new tokens, lr 1e-5
    python bench/peer_grpo.py --to-reward 0.8 --max-steps 150   # + wall time to a reward of 0.8, copy task
    python bench/peer_grpo.py --device cpu --tiny --steps 3     # the CPU mode (tests/integration/test_peer_bench.py)
    python bench/peer_grpo.py -- +rollout.sglang.attention_backend=triton   # extra rlrun overrides after `--`
    (on the lent GPUs: ITEMS=peer / ITEMS=peer_reward bash tools/device/sglang.sh)

rlrun runs first, in this process (Ray, its trainer and engines, torn down at the end), then TRL on the same device.
TRL's vLLM mode is not run (no vLLM here or on the lent GPUs): TRL generates with transformers `generate`, its default.
Both sides get the same job, read from rlrun's resolved RunConfig, so an override changes both:
  - initial weights: the HF dir rlrun writes for its engines (RUN_DIR/engine_init, rlrun.runner.write_engine_init_dir;
    checkpoint.hf when set) is TRL's model; the tokenizer is rlrun's (rlrun.data.tokenizer.tokenizer_for);
  - prompts: rlrun's PromptDataset for the run (same file, seed and shuffle), drawn in rlrun's order; TRL gets them
    unshuffled, so step k of both sides sees the same rollout_batch_size prompts;
  - reward: rlrun.reward.score with data.rm_type (rlrun's registry, in-process on the TRL side), on the text rlrun's
    engines return (TRL's completion_ids decoded with special and stop tokens kept);
  - num_generations = rollout.n_samples_per_prompt, one optimizer step per rollout (generation_batch_size =
    per-device batch x gradient accumulation = all samples of a rollout), max_completion_length =
    rollout.max_response_len, temperature / top_p / top_k, lr, Adam betas / eps, weight decay, grad clip,
    constant schedule, beta=0 (no KL), eps clip, loss = per-sequence mean then batch mean (TRL loss_type=grpo),
    group-normalised advantages (scale_rewards=group), no gradient checkpointing, bf16 mixed precision on the GPU.
What cannot match is printed under "not matched" and listed in docs/benchmarks.md ("Peer benchmark").

Per-phase times. rlrun: the run dir's metrics.jsonl (`time/*_s`). TRL: measured here, around the GRPOTrainer
methods that do the work (read from trl 1.16.0's trainer/grpo_trainer.py): `_generate_single_turn` (the
transformers `generate` call: generation), `_calculate_rewards` (reward), `_generate_and_score_completions` (the whole
rollout: tokenising, generation, reward, advantages); a TrainerCallback's `on_step_end` marks each optimizer step's
end, so training = step - rollout. On CUDA each mark synchronises the device first. Tables give the median of steps
2-8 (1-based; the first step compiles and warms up; the default 9 steps keep the final checkpoint save of rlrun's
last step out of the window).

--to-reward R: a second job, rlrun's copy task (`experiment=copy-grpo-h100`: tiny Qwen3, 32 prompts x 8, 3 new
tokens, char_match reward, lr 3e-3, entropy bonus 0.05; on the CPU its torch trainer + hf engine analogue), on both
sides for up to --max-steps rollouts: the loop time (sum of step times, start-up excluded) until the mean reward of
the last 10 rollouts first reaches R, or "not reached in N steps".

The last line is `PEER_RESULT {json}` (both tables, the ratios, the reward times) for scripts and tests.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

TRL_VERSION = "1.16.0"  # pinned in pyproject.toml (the `peer` extra) and tools/device/trl_kit.sh

# issue 33's reference job on one GPU (train.gpus_per_node=1: hardware=h100 alone plans a node of 8; the lent H200s
# run it as hardware=h100, the plan's 79.6 GiB budget fits in their 139 GiB)
GPU_SPEED = ["hardware=h100", "train.gpus_per_node=1", "model=qwen3-0.6b", "data=toy", "checkpoint.random_init=true",
             "rollout.rollout_batch_size=16", "rollout.n_samples_per_prompt=8", "rollout.max_response_len=256",
             "optim.lr=1e-5"]
GPU_REWARD = ["experiment=copy-grpo-h100"]
# the CPU mode: the tiny model, the toy tokenizer, the torch trainer and the hf engine (hardware=cpu's defaults)
CPU_SPEED = ["hardware=cpu", "model=tiny", "data=toy", "rollout.rollout_batch_size=4",
             "rollout.n_samples_per_prompt=4", "rollout.max_response_len=8", "optim.lr=1e-5"]
# the copy task's CPU analogue: the same experiment through the torch trainer and the hf engine
CPU_REWARD = ["experiment=copy-grpo-h100", "hardware=cpu", "train.backend=torch", "rollout.engine=hf"]
COMMON = ["logging.wandb.mode=disabled", "checkpoint.save_interval=null"]

WINDOW = (2, 8)     # median of steps 2-8, 1-based
REWARD_MEAN_OF = 10  # rollouts in the reward's running mean for --to-reward

# The table's phases: rlrun's from a metrics.jsonl row (time/<phase>_s; the reward is timed inside time/rollout_s),
# TRL's from the clock below (None: TRL has no such phase)
PHASES = [("rollout (generation + reward)", lambda r: r.get("time/rollout_s", 0.0), "rollout"),
          ("generation", lambda r: r.get("time/rollout_s", 0.0) - r.get("time/reward_s", 0.0), "generation"),
          ("reward", lambda r: r.get("time/reward_s", 0.0), "reward"),
          ("training", lambda r: r.get("time/log_probs_s", 0.0) + r.get("time/train_s", 0.0), "training"),
          ("weight sync", lambda r: r.get("time/weight_sync_s", 0.0), None),
          ("offload", lambda r: r.get("time/offload_s", 0.0), None),
          ("step", lambda r: r.get("time/step_s", 0.0), "step")]


def window(values: list[float]) -> list[float]:
    """Steps WINDOW[0]..WINDOW[1] (1-based) of a per-step list; the steps from 2 on when it is shorter."""
    lo, hi = WINDOW
    return values[lo - 1:hi] or values[-1:]


def median_window(values: list[float]) -> float | None:
    return statistics.median(window(values)) if values else None


# ---------------------------------------------------------------------------------------------- rlrun side

def run_rlrun(overrides: list[str]) -> tuple[object, Path, float]:
    """Run the job through rlrun's runner (as `rlrun OVERRIDES` does); returns (cfg, run dir, wall seconds)."""
    from rlrun import runner
    from rlrun.config import load
    from rlrun.config.plan import make_plan
    from rlrun.config.rundir import prepare_run_dir

    t0 = time.perf_counter()
    cfg = load(overrides)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, overrides)
    runner.run(cfg, plan, run_dir)
    return cfg, run_dir, time.perf_counter() - t0


def rlrun_steps(run_dir: Path) -> dict[str, list[float]]:
    """Per-step series from metrics.jsonl: each table phase (absent keys count 0), tokens/s, reward."""
    from rlrun.metrics import METRICS_FILE, read_metrics

    rows = read_metrics(run_dir / METRICS_FILE)
    out: dict[str, list[float]] = {label: [of(r) for r in rows] for label, of, _ in PHASES}
    # perf/rollout_tokens_per_s is per second of time/rollout_s: the generated tokens over generation alone
    out["gen_tokens_per_s"] = [r.get("perf/rollout_tokens_per_s", 0.0) * r.get("time/rollout_s", 0.0) / g
                               if g > 0 else 0.0 for r, g in zip(rows, out["generation"], strict=True)]
    out["weight_sync_gb"] = [r.get("perf/weight_sync_gb", 0.0) for r in rows]
    out["reward_mean"] = [r["rollout/reward_mean"] for r in rows]
    out["keys"] = sorted({k for r in rows for k in r if k.startswith("time/")})  # type: ignore[assignment]
    # the weight sync's and the offload's own parts (weight_sync/pause_s, offload/release_s, ...): where they go
    out["parts"] = {k: [r.get(k, 0.0) for r in rows]  # type: ignore[assignment]
                    for k in sorted({k for r in rows for k in r if k.startswith(("weight_sync/", "offload/"))})}
    return out


# ---------------------------------------------------------------------------------------------- TRL side

def trl_prompts(cfg, tokenizer, run_dir: Path, n_rows: int) -> list[dict]:
    """The prompts rlrun drew, in its order (its PromptDataset for this run dir): TRL's rows, unshuffled."""
    from rlrun.parts.sampling import load_prompts

    items = load_prompts(cfg, tokenizer, run_dir).next_batch(n_rows)
    return [{"prompt": it.text, "label": json.dumps(it.label), "metadata": json.dumps(it.metadata or {})}
            for it in items]


class _Clock:
    """Wall time per named phase of the current optimizer step (CUDA synchronised at each mark)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.current: dict[str, float] = {}
        self.steps: list[dict[str, float]] = []
        self.rewards: list[float] = []
        self.prompts: list[list[str]] = []  # each rollout's prompts, in the order TRL generated them
        self.last = 0.0

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def wrap(self, obj, name: str, phase: str, tokens=None):
        inner = getattr(obj, name)

        def timed(*args, **kwargs):
            t0 = self.now()
            out = inner(*args, **kwargs)
            self.current[phase] = self.current.get(phase, 0.0) + self.now() - t0
            if tokens is not None:
                self.current["gen_tokens"] = self.current.get("gen_tokens", 0.0) + tokens(out)
            return out

        setattr(obj, name, timed)


def trl_settings(cfg, micro_batch: int | None, cuda: bool, dtype: str):
    """GRPOConfig keyword arguments for rlrun's resolved config (the matching table of docs/benchmarks.md)."""
    r, o, a = cfg.rollout, cfg.optim, cfg.algo
    per_rollout = r.rollout_batch_size * r.n_samples_per_prompt
    micro = min(micro_batch or per_rollout, per_rollout)
    if per_rollout % micro:
        raise SystemExit(f"--trl-micro-batch {micro} must divide the {per_rollout} samples of a rollout")
    return dict(
        num_generations=r.n_samples_per_prompt,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_rollout // micro,  # -> generation_batch_size = every sample, one step
        num_iterations=1,
        max_completion_length=r.max_response_len,
        temperature=r.temperature, top_p=r.top_p, top_k=max(r.top_k, 0),  # rlrun -1 = off, TRL 0 = off
        beta=0.0,
        entropy_coef=a.entropy_coef,  # TRL's bonus is the mean per-token entropy, as rlrun's (3-token answers)
        learning_rate=o.lr, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=o.adam_beta1, adam_beta2=o.adam_beta2, adam_epsilon=o.adam_eps,
        weight_decay=o.weight_decay, max_grad_norm=o.clip_grad,
        epsilon=a.eps_clip, epsilon_high=a.eps_clip_high if a.eps_clip_high is not None else a.eps_clip,
        loss_type="grpo" if not cfg.train.calculate_per_token_loss else "dapo",
        scale_rewards="group" if a.normalize_std else "none",
        gradient_checkpointing=False,
        bf16=cuda, use_cpu=not cuda,
        model_init_kwargs={"dtype": dtype},
        shuffle_dataset=False,
        seed=cfg.run.seed,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
    )


def run_trl(cfg, model_dir: str, tokenizer, rows: list[dict], steps: int, out_dir: Path, micro_batch: int | None,
            dtype: str) -> tuple[_Clock, dict, float]:
    """GRPOTrainer on the same job: returns the per-step clock, the settings and the wall seconds."""
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from datasets import Dataset

    from rlrun.reward import score

    cuda = torch.cuda.is_available()
    if not cuda and "OMP_NUM_THREADS" in cfg.hardware.env:
        # rlrun's trainer and engine processes run with hardware.env's thread count (1 on hardware=cpu); TRL's one
        # process gets the same (more threads than free cores made its steps 30x slower on the shared 2-core machine)
        torch.set_num_threads(int(cfg.hardware.env["OMP_NUM_THREADS"]))
    clock = _Clock(cuda)
    rm_type = cfg.data.rm_type

    def rlrun_reward(prompts, completions, completion_ids, label, metadata, **_):
        # the response text as rlrun's engines return it (skip_special_tokens=false, no_stop_trim: a stop token stays
        # in the text; rlrun.rollout.client.Sampling), not TRL's `completions` (special tokens skipped): with
        # char_match, "73<eos>" scores 2/7 against "739" where "73" scores 2/3
        texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=False)
        scores = [float(score(rm_type, c, json.loads(lab), json.loads(m)))
                  for c, lab, m in zip(texts, label, metadata, strict=True)]
        clock.rewards.append(statistics.fmean(scores))
        clock.prompts.append(list(dict.fromkeys(prompts)))
        return scores

    class StepMarks(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.last = clock.now()

        def on_step_end(self, args, state, control, **kw):
            t = clock.now()
            clock.current["step"], clock.last = t - clock.last, t
            clock.current["training"] = clock.current["step"] - clock.current.get("rollout", 0.0)
            clock.steps.append(clock.current)
            clock.current = {}

    settings = trl_settings(cfg, micro_batch, cuda, dtype)
    args = GRPOConfig(output_dir=str(out_dir), max_steps=steps, **settings)
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=model_dir, reward_funcs=rlrun_reward, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, callbacks=[StepMarks()])
    clock.wrap(trainer, "_generate_single_turn", "generation", tokens=lambda out: sum(len(c) for c in out[0]))
    clock.wrap(trainer, "_calculate_rewards", "reward")
    clock.wrap(trainer, "_generate_and_score_completions", "rollout")
    trainer.train()
    wall = time.perf_counter() - t0
    del trainer
    if cuda:
        torch.cuda.empty_cache()
    return clock, settings, wall


def trl_steps(clock: _Clock) -> dict[str, list[float]]:
    out = {label: [s.get(key, 0.0) for s in clock.steps] for label, _, key in PHASES if key}
    out["gen_tokens_per_s"] = [s.get("gen_tokens", 0.0) / s["generation"] if s.get("generation") else 0.0
                               for s in clock.steps]
    out["reward_mean"] = list(clock.rewards)
    return out


def same_prompts(run_dir: Path, trl_prompts: list[list[str]]) -> list[bool]:
    """Per rollout: is the prompt of rlrun's first group (its rollout records, logging.rollout_records=sample)
    the first prompt TRL generated for that step?"""
    import pyarrow.parquet as pq

    table = pq.read_table(run_dir / "rollouts", columns=["rollout_id", "group_id", "prompt"]).to_pylist()
    first: dict[int, tuple[int, str]] = {}
    for row in table:
        k = row["rollout_id"]
        if k not in first or row["group_id"] < first[k][0]:
            first[k] = (row["group_id"], row["prompt"])
    return [k < len(trl_prompts) and bool(trl_prompts[k]) and trl_prompts[k][0] == first[k][1] for k in sorted(first)]


# ---------------------------------------------------------------------------------------------- reports

def not_matched(cfg, dtype: str, cuda: bool) -> list[str]:
    """Every setting the two sides cannot share, with the reason (also in docs/benchmarks.md)."""
    out = [
        f"generation: rlrun uses {cfg.rollout.engine} engines (SGLang on the GPU: continuous batching, CUDA graphs, "
        "paged KV cache); TRL uses transformers `generate` on the trainer's own model (its default). TRL's vLLM "
        "mode is not available: vLLM is not installed here or on the device (no wheels carried), so it is not run",
        "sampling RNG: the same temperature/top-p/top-k, but different generators, so the samples (and with 256 "
        "random-init tokens nothing else) differ; every sample of the 0.6B job runs to max_response_len on both",
        "advantage eps: rlrun divides by (std + 1e-6), TRL by (std + 1e-4)",
        "weight sync / offload: TRL generates with the trained model itself, so it has neither phase",
    ]
    if cuda:
        out.append(f"precision: rlrun's Megatron trainer keeps bf16 weights with fp32 master copies in its "
                   f"optimizer; TRL loads the model as {dtype} and trains under bf16 autocast (bf16=True)"
                   + (", so its generation runs in fp32" if dtype == "float32" else
                      ", so its optimizer updates bf16 weights (no fp32 master copy)"))
        out.append("micro-batches: rlrun packs samples by train.max_tokens_per_gpu; TRL splits the rollout into "
                   "per_device_train_batch_size samples with gradient accumulation (one optimizer step either way)")
    else:
        out.append("precision: fp32 on both sides (the CPU torch backend; TRL use_cpu=True, bf16=False); threads: "
                   "hardware.env's OMP_NUM_THREADS per rlrun process (trainer, engine), the same for TRL's one process")
    return out


def table(title: str, series: dict[str, list[float]], labels: list[str]) -> list[str]:
    lines = [f"{title}: median of steps {WINDOW[0]}-{WINDOW[1]} (of {len(series['step'])})",
             "| phase | s |", "|---|---|"]
    for label in labels:
        v = median_window(series.get(label, []))
        lines.append(f"| {label} | {'-' if v is None else f'{v:.3f}'} |")
    tps = median_window(series.get("gen_tokens_per_s", []))
    if tps:
        lines.append(f"| generation tokens/s | {tps:.0f} |")
    return lines


def compare(rl: dict[str, list[float]], trl: dict[str, list[float]]) -> tuple[list[str], dict]:
    lines = ["| phase | rlrun s | TRL s | rlrun/TRL |", "|---|---|---|---|"]
    ratios = {}
    for label, _, key in PHASES:
        a = median_window(rl[label])
        b = median_window(trl[label]) if key else None
        ratio = a / b if a is not None and b else None
        if ratio is not None:
            ratios[label] = ratio
        cell = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(f"| {label} | {cell(a)} | {cell(b)} | {'-' if ratio is None else f'{ratio:.3f}'} |")
    if ratios.get("step"):
        lines.append(f"rlrun/TRL step time {ratios['step']:.3f}: rlrun is {1 / ratios['step']:.2f}x TRL's speed")
    return lines, ratios


def time_to_reward(rewards: list[float], step_s: list[float], target: float) -> dict:
    """Loop seconds until the mean reward of the last REWARD_MEAN_OF rollouts first reaches target; and the curve
    (the mean reward of each block of REWARD_MEAN_OF rollouts)."""
    curve = [round(statistics.fmean(rewards[i:i + REWARD_MEAN_OF]), 3) for i in range(0, len(rewards), REWARD_MEAN_OF)]
    found = _first_reach(rewards, step_s, target)
    return {**found, "curve": curve}


def _first_reach(rewards: list[float], step_s: list[float], target: float) -> dict:
    for i in range(REWARD_MEAN_OF - 1, len(rewards)):
        if statistics.fmean(rewards[i - REWARD_MEAN_OF + 1:i + 1]) >= target:
            return {"reached": True, "rollout": i + 1, "loop_s": sum(step_s[:i + 1])}
    last = statistics.fmean(rewards[-REWARD_MEAN_OF:]) if rewards else None
    return {"reached": False, "steps": len(rewards), "last_mean": last, "loop_s": sum(step_s),
            "text": f"not reached in {len(rewards)} steps (last {REWARD_MEAN_OF}-rollout mean "
                    f"{'-' if last is None else f'{last:.3f}'})"}


def both(overrides: list[str], steps: int, out: Path, name: str, micro_batch: int | None, dtype: str) -> dict:
    """One job on both sides: rlrun first (its run dir gives TRL the weights and prompts), then TRL."""
    import torch

    from rlrun.data.tokenizer import tokenizer_for
    from rlrun.runner import ENGINE_INIT_DIR

    ov = overrides + COMMON + [f"rollout.num_rollout={steps}", f"run.name=peer-{name}", f"run.output_dir={out}"]
    print(f"[peer] rlrun {' '.join(ov)}", flush=True)
    cfg, run_dir, rl_wall = run_rlrun(ov)
    rl = rlrun_steps(run_dir)
    model_dir = cfg.checkpoint.hf or str(run_dir / ENGINE_INIT_DIR)
    tokenizer = tokenizer_for(cfg)
    rows = trl_prompts(cfg, tokenizer, run_dir, steps * cfg.rollout.rollout_batch_size)
    print(f"[peer] TRL {TRL_VERSION} GRPOTrainer on {model_dir}, {len(rows)} prompts in rlrun's order", flush=True)
    clock, settings, trl_wall = run_trl(cfg, model_dir, tokenizer, rows, steps, run_dir / "trl", micro_batch, dtype)
    tr = trl_steps(clock)
    return {"cfg": cfg, "run_dir": str(run_dir), "rlrun": rl, "trl": tr, "trl_settings": settings,
            "same_prompts": same_prompts(run_dir, clock.prompts),
            "rlrun_wall_s": rl_wall, "trl_wall_s": trl_wall, "cuda": torch.cuda.is_available()}


def main(argv: list[str]) -> dict:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--tiny", action="store_true", help="the CPU job (model=tiny, toy tokenizer); implied by --device cpu")
    p.add_argument("--steps", type=int, default=9, help="rollouts per side for the per-phase tables")
    p.add_argument("--to-reward", type=float, default=None, help="also time both sides to this copy-task reward")
    p.add_argument("--max-steps", type=int, default=150, help="rollouts per side for --to-reward")
    p.add_argument("--skip-speed", action="store_true", help="only the --to-reward job")
    p.add_argument("--trl-micro-batch", type=int, default=None,
                   help="TRL's per_device_train_batch_size (default: 32 on the GPU, the whole rollout on the CPU)")
    p.add_argument("--trl-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="TRL's model_init dtype (float32 = TRL's default: fp32 master weights, bf16 autocast)")
    p.add_argument("--out", default="/tmp/peer_grpo", help="run dirs (rlrun's; TRL's output under RUN_DIR/trl)")
    a = p.parse_args(argv)
    gpu = a.device == "gpu" and not a.tiny
    micro = a.trl_micro_batch or (32 if gpu else None)
    out = Path(a.out)
    result: dict = {"trl_version": TRL_VERSION, "device": "gpu" if gpu else "cpu",
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    import trl  # fail before any work when TRL is missing

    result["trl_version"] = trl.__version__
    report: list[str] = []
    if not a.skip_speed:
        job = both((GPU_SPEED if gpu else CPU_SPEED) + extra, a.steps, out, "speed", micro, a.trl_dtype)
        rl, tr = job["rlrun"], job["trl"]
        labels = [label for label, _, _ in PHASES]
        report += ["", f"## rlrun ({job['run_dir']}; metrics keys {', '.join(rl['keys'])})"]
        report += table("rlrun", rl, labels)
        gb = median_window(rl["weight_sync_gb"])
        if gb:
            report.append(f"weight sync: {gb * 1e3:.2f} MB a push")
        parts = {k: median_window(v) for k, v in rl["parts"].items()}
        if parts:
            report.append("parts, median ms: " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in parts.items()))
        report += ["", f"## TRL {result['trl_version']} GRPOTrainer"]
        report += table("TRL", tr, [label for label, _, key in PHASES if key])
        report += ["", "## rlrun / TRL"]
        lines, ratios = compare(rl, tr)
        report += lines
        report += [f"same prompts per step (rlrun's first group = TRL's first prompt): {job['same_prompts']}"]
        report += ["", "TRL settings: " + json.dumps(job["trl_settings"], default=str)]
        report += ["not matched:"] + [f"  - {x}" for x in not_matched(job["cfg"], a.trl_dtype, job["cuda"])]
        result["speed"] = {"run_dir": job["run_dir"], "steps": {"rlrun": len(rl["step"]), "trl": len(tr["step"])},
                           "rlrun": {k: median_window(v) for k, v in rl.items() if k not in ("keys", "parts")},
                           "rlrun_parts": parts,
                           "trl": {k: median_window(v) for k, v in tr.items()}, "ratio": ratios,
                           "rlrun_wall_s": job["rlrun_wall_s"], "trl_wall_s": job["trl_wall_s"],
                           "trl_settings": job["trl_settings"], "same_prompts": job["same_prompts"]}
    if a.to_reward is not None:
        job = both((GPU_REWARD if gpu else CPU_REWARD) + extra, a.max_steps, out, "reward", None, a.trl_dtype)
        res = {side: time_to_reward(job[side]["reward_mean"], job[side]["step"], a.to_reward)
               for side in ("rlrun", "trl")}
        report += ["", f"## time to a {REWARD_MEAN_OF}-rollout mean reward of {a.to_reward} "
                       f"(copy task, up to {a.max_steps} rollouts; loop time, start-up excluded)"]
        for side, r in res.items():
            report.append(f"{side}: " + (f"rollout {r['rollout']}, {r['loop_s']:.1f} s" if r["reached"]
                                         else f"{r['text']}, {r['loop_s']:.1f} s")
                          + f"; mean reward per {REWARD_MEAN_OF} rollouts {r['curve']}")
        result["to_reward"] = {"target": a.to_reward, **res, "run_dir": job["run_dir"]}
    print("\n".join(report), flush=True)
    print("PEER_RESULT " + json.dumps(result, default=str), flush=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
