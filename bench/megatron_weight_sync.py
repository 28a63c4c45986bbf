"""Disaggregated weight sync from a Megatron trainer rank to an hf engine process over NCCL
(issue 6's GPU acceptance; needs 2 GPUs: NCCL puts one rank per GPU).

    python bench/megatron_weight_sync.py            # trainer on cuda:0, engine on cuda:1

The trainer is MegatronBackend (random-init Qwen3-0.6B shape, bf16); the engine starts from a
*different* random init, so the sync must move every weight. Export = TP-gathered, HF-named
buckets from the backend (export_buckets); transfer = rlrun.rollout.engines.group.broadcast_weights
(/init_weights_update_group + /update_weights_from_distributed, the engine receives exactly as
SGLang's does). Verified: the engine's weight checksum equals the trainer's export.
Prints one JSON line: bytes, export seconds, broadcast seconds, GB/s, checksum_equal.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlrun.rollout import weights as W  # noqa: E402
from rlrun.rollout.engines.group import broadcast_weights, local_engine_group  # noqa: E402
from rlrun.rollout.process import free_port  # noqa: E402
from rlrun.rollout.tiny_model import build_tokenizer  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--bucket-mb", type=int, default=512)
    p.add_argument("--engine-device", default="cuda:1")
    p.add_argument("--log-dir", default=None, help="the engine's log (default: a temp dir)")
    args = p.parse_args()
    from rlrun.config import load
    from rlrun.train.hf_model import build_causal_lm
    from rlrun.train.megatron_backend import MegatronBackend
    cfg = load([f"model={args.model}", "checkpoint.random_init=true", "hardware=h100", "train.backend=megatron", "train.gpus_per_node=1",
                "train.gradient_accumulation_fusion=false", "rollout.max_response_len=64", "eval.max_response_len=64"])
    tmp = Path(tempfile.mkdtemp(prefix="rlrun-msync-"))
    base = build_causal_lm(cfg.model, None, cfg.run.seed + 1, dtype=torch.bfloat16)
    base.save_pretrained(tmp / "base")
    build_tokenizer().save_pretrained(tmp / "base")
    del base
    trainer = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=1)
    trainer.init()
    with local_engine_group(tmp / "base", 1, router="sglang_router",
                            log_dir=args.log_dir or tmp / "logs", device=args.engine_device,
                            dtype="bfloat16", threads=4, health_interval_s=60) as group:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        named = [item for bucket in trainer.export_buckets(args.bucket_mb << 20) for item in bucket]
        torch.cuda.synchronize()
        export_s = time.perf_counter() - t0
        want = dict(named)
        if cfg.model.tie_word_embeddings:  # the engine's state_dict also lists the tied lm_head
            want["lm_head.weight"] = want["model.embed_tokens.weight"]
        before = set(group.checksums().values())
        r = broadcast_weights(group.urls, named, "1", master_address="127.0.0.1", master_port=free_port(),
                              backend="nccl", bucket_bytes=args.bucket_mb << 20)
        after = set(group.checksums().values())
        print("SYNC", json.dumps({"model": args.model, "bytes": r["bytes"], "export_s": round(export_s, 4),
                                  "broadcast_s": round(r["seconds"], 4), "gb_per_s": round(r["gb_per_s"], 2),
                                  "changed": before != after, "checksum_equal": after == {W.checksum(want)}}),
              flush=True)
    trainer.shutdown()


if __name__ == "__main__":
    main()
