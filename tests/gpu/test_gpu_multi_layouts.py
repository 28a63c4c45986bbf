"""rlrun's production path on more than one GPU, each layout run end to end through the `rlrun` CLI (Hydra ->
plan -> an embedded Ray cluster -> Megatron trainer actors + SGLang engines behind the real sglang-router):

    2 GPUs  dp2_trainer_tp2_engine    colocated: a DP=2 trainer and ONE SGLang engine with TP=2, CUDA-IPC push
                                      (one payload per TP rank) to the TP=2 engine through rlrun's launch
    2 GPUs  dp2_trainer_two_engines   colocated: a DP=2 trainer and TWO 1-GPU engines behind the router
    2 GPUs  nccl_one_plus_one         disaggregated: trainer on GPU 0, engine on GPU 1, NCCL broadcast (kept group)
    4 GPUs  qwen3_4b_colocated        the headline shape: Qwen3-4B (random init: the lent machines cannot download
                                      weights), Megatron TP 2 x DP 2 over four GPUs, two TP=2 engines, IPC push,
                                      memory released/resumed every step
    4 GPUs  qwen3_4b_disaggregated    Qwen3-4B, trainer TP 2 on GPUs 0-1, two engines on GPUs 2-3, NCCL broadcast

Each run must finish every rollout (the run's own invariants stop it on a stale engine version or a failed push),
and the engines' log-probs must equal the trainer's on the samples they generated: `train/train_rollout_logp_abs_diff`
(mean |trainer - engine| log-prob per token, sync loop, so both hold the same weights). Tolerance: on the copy task's
tiny shape the two-GPU sync run measured 0.0007-0.0011 (2026-11-28, docs/benchmarks.md); bf16 rounding of a log-prob
of size ~1-5 is ~0.01-0.03 per token (tests/gpu/test_sglang_engine.py's docstring), so a token mean of 0.05 allows that
with margin, while weights one optimizer step stale measured 0.10-0.18 on the same task (the async run).
The 4B runs print the per-phase means, the weight-sync GB/s and each GPU's peak memory (nvidia-smi) next to the
plan's estimate; tools/device/sglang.sh (ITEMS=layouts2 / layouts4) stages and runs them.
"""
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import pytest
import torch
from test_sglang_engine import KIT_ARGS as KIT  # the kit's backends (no FA3), no prefill CUDA graphs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                reason="needs SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)")

MISMATCH_TOL = 0.05  # see the module docstring
RUN_LIMIT_S = float(os.environ.get("LAYOUT_TIMEOUT_S", 540))  # a run's wall limit (tools/device/sglang.sh sets it)
LOG_DIR = os.environ.get("LAYOUT_LOG_DIR")  # when set, each run's log and metrics are copied there (device $OUT)
COPY = ["experiment=copy-grpo-h100", "rollout.num_rollout=4", *KIT]
QWEN3_4B = ["hardware=h100", "model=qwen3-4b", "model.vocab_size=64", "data=toy", "checkpoint.random_init=true",
            "train.backend=megatron", "rollout.engine=sglang", "train.gradient_accumulation_fusion=false",
            "rollout.rollout_batch_size=16", "rollout.n_samples_per_prompt=4", "rollout.max_response_len=256",
            "rollout.num_rollout=10", "optim.lr=1e-6", "logging.wandb.mode=disabled", *KIT]

LAYOUTS = {
    "dp2_trainer_tp2_engine": (2, COPY + ["train.gpus_per_node=2", "rollout.gpus_per_engine=2"]),
    "dp2_trainer_two_engines": (2, COPY + ["train.gpus_per_node=2", "rollout.gpus_per_engine=1"]),
    "nccl_one_plus_one": (2, COPY + ["train.colocate=false", "rollout.num_gpus=1"]),
    "qwen3_4b_colocated": (4, QWEN3_4B + ["train.gpus_per_node=4", "parallelism.tp=2", "rollout.gpus_per_engine=2"]),
    "qwen3_4b_disaggregated": (4, QWEN3_4B + ["train.colocate=false", "train.gpus_per_node=2", "parallelism.tp=2",
                                              "rollout.num_gpus=2", "rollout.gpus_per_engine=1"]),
}


class GpuMemory:
    """Each GPU's peak used memory (MiB, every process on it) while a run goes, polled from nvidia-smi."""

    def __init__(self, interval_s: float = 0.5):
        self.peak: dict[int, int] = {}
        self.interval_s, self.stop = interval_s, threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self) -> None:
        while not self.stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout
            for line in out.strip().splitlines():
                i, used = (int(x) for x in line.split(","))
                self.peak[i] = max(self.peak.get(i, 0), used)
            self.stop.wait(self.interval_s)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def _rlrun(args: list[str], timeout_s: float, log=None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess; `log`: a file that gets its output as it comes (a hung or failed run is readable)."""
    cmd = [sys.executable, "-c", "import sys; from rlrun.cli import main; sys.exit(main())", *args]
    if log is None:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ))
    with open(log, "w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, timeout=timeout_s,
                              env=dict(os.environ))


def _plan(args: list[str]) -> dict:
    out = _rlrun(["plan", "--json", *args], 120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _keep(layout: str, run_root, peak: dict) -> None:
    """The run's log, metrics, engine and router logs and peak memory into LAYOUT_LOG_DIR (a timed-out or failed run stays readable)."""
    if not LOG_DIR:
        return
    import shutil
    dest = os.path.join(LOG_DIR, layout)
    os.makedirs(dest, exist_ok=True)
    for f in [run_root / "run.log", *run_root.glob(f"{layout}/*/metrics.jsonl"), *run_root.glob(f"{layout}/*/logs/*")]:
        shutil.copy(f, dest)
    with open(os.path.join(dest, "peak_memory_mib.json"), "w") as f:
        json.dump(peak, f)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_runs_every_rollout_with_the_trainers_weights(layout, tmp_path):
    gpus, args = LAYOUTS[layout]
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs (device kind nvidia-h100-x{gpus}); {torch.cuda.device_count()} here")
    args = [*args, f"run.output_dir={tmp_path}", f"run.name={layout}"]
    plan = _plan(args)
    t0 = time.perf_counter()
    log = tmp_path / "run.log"
    print(f"\nLAYOUT {layout}: running, output in {log}", flush=True)
    try:
        with GpuMemory() as mem:
            out = _rlrun(args, RUN_LIMIT_S, log)
    finally:
        _keep(layout, tmp_path, mem.peak)
    wall = time.perf_counter() - t0
    assert out.returncode == 0, log.read_text()[-6000:]
    rows = [json.loads(line) for line in next(tmp_path.glob(f"{layout}/*/metrics.jsonl")).read_text().splitlines()]
    rows = [r for r in rows if "rollout/reward_mean" in r]
    assert len(rows) == plan["num_rollout"]
    gaps = [r["train/train_rollout_logp_abs_diff"] for r in rows]
    later = rows[1:] or rows
    phases = {k: round(statistics.fmean(r[k] for r in later if k in r), 3)
              for k in sorted(rows[-1]) if k.startswith(("time/", "perf/weight_sync"))}
    m = plan["memory"]
    print(f"LAYOUT {layout}: {len(rows)} rollouts in {wall:.0f} s (with start-up); trainer "
          f"TP{plan['tp']} x DP{plan['dp']}, {plan['num_engines']} engine(s) x {plan['gpus_per_engine']} GPU(s), "
          f"weight sync {plan['weight_sync']}\n  per-phase means after the first rollout: {phases}\n"
          f"  trainer/engine log-prob gap per rollout: {[round(g, 4) for g in gaps]}\n"
          f"  peak memory per GPU (GiB, nvidia-smi): {({i: round(v / 1024, 1) for i, v in sorted(mem.peak.items())})}"
          f"; plan: trainer {m['trainer_total']:.1f}, engine {m['engine_total']:.1f}, peak {m['peak']:.1f} "
          f"(offload train {plan['offload_train']}, rollout {plan['offload_rollout']})", flush=True)
    assert max(gaps) < MISMATCH_TOL, gaps
    if plan["weight_sync"] == "tensor":  # colocated: each engine's TP ranks got the copies on their own GPUs
        assert "gathered per engine" in log.read_text(), "the tensor push fell back to the lead rank's push"
