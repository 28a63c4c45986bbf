"""Two-GPU checks, one process per GPU (torchrun --nproc-per-node 2 tests/gpu/tp_check.py),
driven by test_megatron_tp.py:

1. TP=2 (with and without sequence parallelism) logits equal transformers' (fp32, 1e-5) for
   every architecture, and the TP-gathered HF export is bit-exact;
2. the backend at TP=2 (one DP group) and at TP=1 x DP=2 gives the same loss and grad norm on the
   same global batch, each rank receiving the contiguous shard the Ray train group sends it.

Every rank prints `TP2 rank R: <phase>` as it enters a phase, and dumps its Python stacks to
stderr (faulthandler) if it is still running after TP_CHECK_DUMP_S seconds (default 100): a
hang shows where each rank waits. The first run hung in the backend's rendezvous (see
MegatronBackend.init: torchrun's agent-store variable made every rank a store client).
"""
import faulthandler
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import parity as P  # noqa: E402
from test_megatron_backend import OVERRIDES, _batch  # noqa: E402

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def log(*a):
    if RANK == 0:
        print(*a, flush=True)


def trace(phase: str) -> None:
    print(f"TP2 rank {RANK}: {phase}", flush=True)


def tp_parity():
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    from rlrun.train.megatron.weights import export_hf
    for sp in (False, True):
        for family, conf in sorted(P.ARCHS.items()):
            trace(f"parity {family} sp={sp}")
            torch.manual_seed(3)
            model = P.small_model(conf)
            hf = P.hf_causal_lm(model, torch.float32).cuda().eval()
            gpt = P.megatron_from_hf(model, hf, P.parallelism(tp=2, sp=sp), torch.float32)
            ids = torch.randint(0, model.vocab_size, (2, 256), device="cuda")
            dist.broadcast(ids, 0)
            pos = torch.arange(256, device="cuda")[None].expand(2, -1)
            with torch.no_grad():
                out = gather_from_tensor_model_parallel_region(gpt(ids, pos, attention_mask=None))
                err = P.rel_err(out, hf(ids).logits)
            sd = hf.state_dict()
            got = {k: v for b in export_hf(gpt, model, bucket_bytes=1 << 20) for k, v in b}
            exact = all(torch.equal(got[k], sd[k]) for k in got) and \
                set(got) == set(sd) - ({"lm_head.weight"} if model.tie_word_embeddings else set())
            log(f"TP2 {family} sp={sp} fp32 rel_err={err:.3e} export_exact={exact}")
            assert err < 1e-5 and exact
            ps.destroy_model_parallel()


def backend_step(tp: int, port: int, device: str = "cuda"):
    """One log-prob pass and one train step of the backend at TP=tp on this rank's shard.
    device="cpu": tools/device/cpu_backend_harness.py runs the same path over gloo."""
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    trace(f"backend tp={tp} init")
    # TP_CHECK_EXTRA: more overrides, e.g. "parallelism.sequence_parallel=true algo.entropy_coef=0.01"
    cfg = load(OVERRIDES + [f"parallelism.tp={tp}", "parallelism.sequence_parallel=false",
                            "train.gpus_per_node=2", "rollout.gpus_per_engine=1"]
               + os.environ.get("TP_CHECK_EXTRA", "").split()
               + (["parallelism.sequence_parallel=false"] if tp == 1 else []))  # SP needs TP > 1
    be = MegatronBackend(cfg, rank=RANK, world_size=WORLD, gpu_id=RANK, total_steps=10)
    if device == "cpu":
        be.device = torch.device("cpu")
    be.init("127.0.0.1", port)
    batch = _batch(cfg.model.vocab_size, seed=5)
    trace(f"backend tp={tp} log-probs + train step")
    logp = be.compute_log_probs(batch.shard(RANK, WORLD))
    m = be.train_step(batch.shard(RANK, WORLD))
    after = be.compute_log_probs(batch.shard(RANK, WORLD))  # the updated weights (optimizer + param copy)
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, [[x.tolist() for x in logp], [x.tolist() for x in after]])
    be.shutdown()
    return m, *([torch.tensor(x) for part in gathered for x in part[i]] for i in (0, 1))


def main():
    faulthandler.dump_traceback_later(float(os.environ.get("TP_CHECK_DUMP_S", 100)), exit=False)
    torch.cuda.set_device(RANK)
    P.init_dist("nccl")
    tp_parity()
    dist.destroy_process_group()
    compare_backends()
    faulthandler.cancel_dump_traceback_later()


def compare_backends(device: str = "cuda", tol: float = 2e-2):
    """TP=2 (one DP group) vs TP=1 x DP=2 on the same global batch: loss, grad norm, log-probs."""
    base = int(os.environ["MASTER_PORT"])
    m2, lp2, after2 = backend_step(2, base + 11, device)
    m1, lp1, after1 = backend_step(1, base + 12, device)
    log("TP2 backend tp=2  ", {k: round(v, 5) for k, v in m2.items()})
    log("TP2 backend tp=1x2", {k: round(v, 5) for k, v in m1.items()})
    lp_err = P.rel_err(torch.cat(lp2), torch.cat(lp1))
    after_err = P.rel_err(torch.cat(after2), torch.cat(after1))
    moved = P.rel_err(torch.cat(after1), torch.cat(lp1))
    log(f"TP2 logp rel_err={lp_err:.3e}; after the step rel_err={after_err:.3e} (the step moved them {moved:.3e})")
    assert abs(m2["train/loss"] - m1["train/loss"]) <= tol * abs(m1["train/loss"]) + 1e-4
    assert abs(m2["train/grad_norm"] - m1["train/grad_norm"]) <= tol * m1["train/grad_norm"]
    assert lp_err < tol and after_err < tol and moved > after_err
    log("TP2 ALL OK")


if __name__ == "__main__":
    main()
