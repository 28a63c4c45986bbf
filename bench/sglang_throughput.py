"""Rollout throughput with a real SGLang engine: SGLang alone vs rlrun's path (client -> router -> engine).

    python bench/sglang_throughput.py --model qwen3-0.6b --prompts 8 --n 8 --new 256 --repeat 3
(on the lent GPU with the kit staged: tools/device/sglang.sh). One engine is started by rlrun's own
launch code (SGLangEngine with rollout.sglang's kernels), the real sglang-router in front of it. The
same work, --prompts GRPO groups of --n samples, is sent two ways, alternately, --repeat times each:
  sglang   one batched POST /generate of all prompts x n straight to the engine (as the kit and
           sglang.bench_offline_throughput measure SGLang alone)
  rlrun    RolloutClient.generate per sample through the router (max_concurrency = prompts x n), with
           return_logprob and the per-sample seed a rollout gives it: where the engine samples without the
           seed (EngineKind.seeded) the client sends none and a group goes as one batched request, as in a rollout
--n 1 --prompts 64 is the earlier form of the bench (64 different prompts, one request each).
Every request generates exactly --new tokens (ignore_eos, T=1). Prints one JSON line per way: median
tokens/s and rlrun / sglang. Random-init weights of the model's shape, the toy tokenizer (vocab 64).
--sglang KEY=VALUE ...: ServerArgs over SGLANG_DEFAULTS (the kit's kernels), e.g. fp8_gemm_runner_backend=deep_gemm.
--fp8: the engine serves the block-wise FP8 dir rollout.fp8 writes (rlrun.runner.write_engine_init_dir), for an
FP8-vs-bf16 comparison of the same model (run it twice, with and without; tools/device/sglang.sh ITEMS=fp8).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _engine_dir(cfg, out: Path) -> str:
    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.runner import write_engine_init_dir

    return write_engine_init_dir(cfg, build_toy_tokenizer(), out)


def _prompts(n: int) -> list[list[int]]:
    return [[4 + (i + j) % 40 for j in range(32)] for i in range(n)]  # 32-token prompts, all different


def alone(url: str, prompts: list[list[int]], new: int) -> tuple[float, int]:
    body = {"input_ids": prompts, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "temperature": 1.0, "ignore_eos": True}}
    t0 = time.perf_counter()
    r = requests.post(f"{url}/generate", json=body, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - t0, sum(len(o["output_ids"]) for o in r.json())


async def through_rlrun(url: str, prompts: list[list[int]], new: int, seeded: bool) -> tuple[float, int, int]:
    """(seconds, tokens, batched requests) of one sample per entry of `prompts` (a group's prompt repeated n times)
    through RolloutClient.generate, all started together as a rollout starts them."""
    from rlrun.rollout.client import RolloutClient, Sampling

    sampling = Sampling(max_new_tokens=new, temperature=1.0, ignore_eos=True)
    async with RolloutClient(url, max_concurrency=len(prompts), request_timeout_s=600, seeded=seeded) as client:
        async def one(ids, seed):
            return len((await client.generate(input_ids=ids, sampling=sampling, seed=seed))["output_ids"])

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(p, 1000 + i) for i, p in enumerate(prompts)))
        return time.perf_counter() - t0, sum(counts), client.batches


# the engine's kernels on the device kit (no FA3, no flashinfer sampling JIT); --sglang KEY=VALUE entries go over these
SGLANG_DEFAULTS = {"attention_backend": "triton", "sampling_backend": "pytorch", "cuda_graph_backend_decode": "full",
                   "cuda_graph_max_bs_decode": "64", "cuda_graph_backend_prefill": "disabled"}


def overrides(model: str, fp8: bool, out_dir: str | Path, sglang: list[str] = ()) -> list[str]:
    """The bench's config: one engine of `model`'s shape on one GPU (TP 1 whatever the model group says), random
    init, the toy vocab, SGLANG_DEFAULTS with `sglang` (KEY=VALUE) over them."""
    extra = dict(kv.split("=", 1) for kv in sglang)
    return ["hardware=h100", f"model={model}", "model.vocab_size=64", "checkpoint.random_init=true",
            "rollout.engine=sglang", "train.gpus_per_node=1", "parallelism.tp=1", "rollout.gpus_per_engine=1",
            "rollout.offload=false", "rollout.mem_fraction_static=0.5", f"rollout.fp8={str(fp8).lower()}",
            f"run.output_dir={out_dir}", *[f"+rollout.sglang.{k}={v}" for k, v in {**SGLANG_DEFAULTS, **extra}.items()]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--prompts", type=int, default=8, help="GRPO groups")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--fp8", action="store_true", help="serve block-wise FP8 weights (rollout.fp8)")
    p.add_argument("--sglang", nargs="*", default=[], help="KEY=VALUE ServerArgs over SGLANG_DEFAULTS")
    a = p.parse_args()
    from rlrun.config import load
    from rlrun.config.kinds import ENGINES
    from rlrun.rollout.routers.protocol import run_router
    from rlrun.rollout.engines.sglang.engine import SGLangEngine

    tmp = Path(tempfile.mkdtemp(prefix="sglbench"))
    cfg = load(overrides(a.model, a.fp8, tmp, a.sglang))
    model_dir = _engine_dir(cfg, tmp / "model")
    engine = SGLangEngine.from_config(cfg, rank=0, gpus=[0], log_dir=tmp, model_path=model_dir)
    t0 = time.perf_counter()
    engine.start(timeout_s=420)
    print(f"engine healthy after {time.perf_counter() - t0:.1f} s", flush=True)
    router = run_router(cfg.rollout, tmp).start()
    try:
        router.add_worker(engine.url)
        prompts = [p for p in _prompts(a.prompts) for _ in range(a.n)]  # each group's prompt n times
        seeded = ENGINES["sglang"].seeded(cfg.rollout.args_of())
        alone(engine.url, prompts[:8], 16)  # warm-up (first batches compile kernels)
        asyncio.run(through_rlrun(router.url, prompts[:8], 16, seeded))
        runs: dict[str, list[float]] = {"sglang": [], "rlrun": []}
        batches = 0
        for _ in range(a.repeat):
            for way in runs:
                if way == "sglang":
                    dt, toks = alone(engine.url, prompts, a.new)
                else:
                    dt, toks, batches = asyncio.run(through_rlrun(router.url, prompts, a.new, seeded))
                assert toks == len(prompts) * a.new, (way, toks)
                runs[way].append(toks / dt)
        med = {way: statistics.median(v) for way, v in runs.items()}
        for way, v in runs.items():
            print(json.dumps({"way": way, "model": a.model, "fp8": a.fp8, "prompts": a.prompts, "n": a.n,
                              "new_tokens": a.new, "tokens_per_s": [round(x) for x in v], "median": round(med[way]),
                              **({"batched_requests": batches, "seeded": seeded} if way == "rlrun" else {})}))
        print(json.dumps({"rlrun_over_sglang": round(med["rlrun"] / med["sglang"], 3)}))
    finally:
        router.stop()
        engine.stop()
        # which FP8 GEMM the engine picked (SGLang 0.5.16 logs DeepGEMM's JIT and the Triton fallback's missing tuned
        # configs): the bench's temp dir is not kept, so its lines go to this output
        for log in sorted(tmp.glob("sglang-*.log")):
            lines = [ln.strip()[:300] for ln in log.read_text(errors="replace").splitlines()
                     if any(k in ln for k in ("DeepGEMM", "deep_gemm", "DEEPGEMM", "W8A8 Block FP8", "fp8_gemm"))]
            print(f"{log.name}: {len(lines)} FP8 GEMM lines" + "".join(f"\n  {ln}" for ln in lines[:4]))


if __name__ == "__main__":
    main()
