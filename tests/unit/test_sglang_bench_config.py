"""bench/sglang_throughput.py's config validates on the CPU for every model the device plan runs it with, so that a
device call never stops at validate (the ninth session's first fp8bench did: qwen3-4b's TP 2 on one GPU); its
--sglang entries go over the kit's kernel defaults instead of replacing them."""
import sys
from pathlib import Path

import pytest

from rlrun.config import load

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sglang_throughput  # noqa: E402  (no torch, no sglang at import)


# FP8 only on dense models (rollout.fp8 refuses a MoE: its expert push is not verified on an FP8 engine)
@pytest.mark.parametrize("model, fp8", [(m, f) for m in ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b") for f in (False, True)]
                         + [("tiny-moe", False)])
def test_the_bench_config_validates_for_one_engine_on_one_gpu(tmp_path, model, fp8):
    cfg = load(sglang_throughput.overrides(model, fp8, tmp_path))
    assert (cfg.parallelism.tp, cfg.rollout.gpus_per_engine, cfg.rollout.fp8) == (1, 1, fp8)
    assert cfg.rollout.sglang["attention_backend"] == "triton"


def test_sglang_entries_go_over_the_defaults(tmp_path):
    cfg = load(sglang_throughput.overrides("qwen3-4b", True, tmp_path,
                                           ["fp8_gemm_runner_backend=deep_gemm", "attention_backend=flashinfer"]))
    s = cfg.rollout.sglang
    assert s["fp8_gemm_runner_backend"] == "deep_gemm" and s["attention_backend"] == "flashinfer"
    assert {k: str(s[k]) for k in sglang_throughput.SGLANG_DEFAULTS if k != "attention_backend"} == \
        {k: v for k, v in sglang_throughput.SGLANG_DEFAULTS.items() if k != "attention_backend"}
