"""Find what keeps a megatron-backend micro-batch out of a CUDA graph: run its forward + loss +
backward eagerly with CUDA's sync debug mode raising at the first host synchronisation (with
autograd's anomaly mode, a failure in the backward names the forward op that created the node).

    python tools/device/graph_probe.py [tiny|qwen3-1.7b] [SEQ]
"""
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from megatron_mfu import overrides  # noqa: E402


def main(name="tiny", seq="96"):
    from rlrun.config import load
    from rlrun.train.base import TrainBatch
    from rlrun.train.batching import loss_normalizer
    from rlrun.train.megatron_backend import MegatronBackend
    seq = int(seq)
    cfg = load(overrides(name, max(seq, 1040), max(seq, 1040)) + ["train.cuda_graphs=true"])
    be = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=10)
    be.init()
    g = torch.Generator().manual_seed(0)
    lens = [seq // 3, seq // 3, seq - 2 * (seq // 3)]
    tokens = [torch.randint(0, cfg.model.vocab_size, (n,), generator=g) for n in lens]
    batch = TrainBatch(tokens=tokens, response_start=[2] * 3, loss_mask=[torch.ones(n - 2) for n in lens],
                       advantages=[torch.randn(n - 2, generator=g) for n in lens])
    be.model.train()
    norm = torch.tensor(loss_normalizer(batch.loss_mask, False, be.device), device=be.device)
    mb = be._micro_batches(batch, seq)[0]
    x = be._loss_inputs(batch, mb, norm)
    be.model.zero_grad_buffer()
    be._micro_batch_fwd_bwd(x, mb.max_seqlen)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autograd.detect_anomaly(check_nan=False):
            be._micro_batch_fwd_bwd(x, mb.max_seqlen)
        print("PROBE no host sync in forward + loss + backward", flush=True)
    except RuntimeError:
        print("PROBE sync:", traceback.format_exc()[-3000:], flush=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    with be.graphs:
        for i in range(3):
            out = be.graphs(x, mb.max_seqlen)
    print("PROBE graphs", be.graphs.stats(), "fallback:", be.graphs.disabled, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
