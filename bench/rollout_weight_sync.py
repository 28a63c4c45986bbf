"""Weight sync bandwidth: trainer process -> hf engine process(es), verified bit-equal by checksum.

Paths (the ones SGLang offers; see src/rlrun/rollout/weights.py):
  broadcast  /init_weights_update_group + /update_weights_from_distributed, torch.distributed
             broadcast from this process (rank 0): gloo on CPU, nccl on GPU
  tensor     /update_weights_from_tensor, portable payload (base64 torch.save in the HTTP body)
  ipc        /update_weights_from_tensor, SGLang's payload: CUDA IPC handles (GPU) or shared
             memory (CPU); trainer and engine on one host, on GPU the same or another GPU
  disk       /update_weights_from_disk (save_pretrained + load)

CPU:  python bench/rollout_weight_sync.py --paths broadcast tensor ipc disk
1 GPU (colocated, CUDA IPC): python bench/rollout_weight_sync.py --trainer-device cuda:0 \
          --engine-device cuda:0 --dtype bfloat16 --shape qwen3-0.6b --paths ipc disk
GPU (NCCL needs one GPU per rank: trainer on cuda:0, engine on cuda:1, e.g. nvidia-h200-x2):
      python bench/rollout_weight_sync.py --backend nccl --trainer-device cuda:0 --engine-device cuda:1 \
          --dtype bfloat16 --shape qwen3-0.6b --paths broadcast
Prints one JSON line per path: bytes, seconds, GB/s, checksum_equal.
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

SHAPES = {  # (hidden, ffn, layers, heads, kv heads, head_dim, vocab)
    "small": (256, 768, 4, 4, 2, 64, 4096),  # ~6M params: the CPU run
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128, 151936),  # Qwen/Qwen3-0.6B's config.json
}


def build(shape: str, dtype: torch.dtype, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    h, f, n, a, kv, hd, v = SHAPES[shape]
    cfg = Qwen3Config(vocab_size=v, hidden_size=h, intermediate_size=f, num_hidden_layers=n, num_attention_heads=a,
                      num_key_value_heads=kv, head_dim=hd, tie_word_embeddings=True, max_position_embeddings=4096)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).to(dtype)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=sorted(SHAPES), default="small")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--trainer-device", default="cpu")
    p.add_argument("--engine-device", default="cpu")
    p.add_argument("--engines", type=int, default=1)
    p.add_argument("--bucket-mb", type=int, default=256)
    p.add_argument("--paths", nargs="+", default=["broadcast", "tensor", "ipc", "disk"])
    args = p.parse_args()
    dtype = W.dtype_from_name(args.dtype)
    tmp = Path(tempfile.mkdtemp(prefix="rlrun-wsync-"))
    base = build(args.shape, dtype, seed=0)
    base.save_pretrained(tmp / "base")
    tok = build_tokenizer()
    tok.save_pretrained(tmp / "base")
    with local_engine_group(tmp / "base", args.engines, router="sglang_router",
                            log_dir=tmp / "logs", device=args.engine_device,
                            dtype=args.dtype, threads=1, health_interval_s=60) as group:
        trainer = build(args.shape, dtype, seed=1).to(args.trainer_device)
        named = list(trainer.state_dict().items())
        want = W.checksum(dict(named))
        nbytes = sum(t.numel() * t.element_size() for _, t in named)
        for version, path in enumerate(args.paths, start=1):
            t0 = time.perf_counter()
            if path == "broadcast":
                broadcast_weights(group.urls, named, str(version), master_address="127.0.0.1",
                                  master_port=free_port(), backend=args.backend, bucket_bytes=args.bucket_mb << 20)
            elif path in ("tensor", "ipc"):
                group.update_weights_from_tensor(named, str(version), bucket_bytes=args.bucket_mb << 20,
                                                 transport="serialized" if path == "tensor" else "ipc")
            elif path == "disk":
                trainer.save_pretrained(tmp / f"v{version}")
                group.update_weights_from_disk(str(tmp / f"v{version}"), str(version))
            else:
                raise SystemExit(f"unknown path {path!r}: broadcast | tensor | ipc | disk")
            seconds = time.perf_counter() - t0
            equal = set(group.checksums().values()) == {want}
            print(json.dumps({"path": path, "shape": args.shape, "dtype": args.dtype, "backend": args.backend,
                              "engines": args.engines, "bytes": nbytes, "seconds": round(seconds, 4),
                              "gb_per_s": round(nbytes / seconds / 1e9, 4), "checksum_equal": equal}), flush=True)
            # back to the base weights between paths so that each path must really move the weights
            group.update_weights_from_disk(str(tmp / "base"), "base")

if __name__ == "__main__":
    main()
