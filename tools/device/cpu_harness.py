"""Develop the megatron backend's model and weight code on the CPU, without device time.

megatron-core hard-codes `torch.cuda.current_device()` for a few buffers (rotary inv_freq, masks);
pointing that at "cpu" lets GPTModel with rlrun's layer spec (its SDPA attention never builds a
mask) run forward on the CPU with gloo. This is a development aid, not a test double: the shipped
checks are tests/gpu on the lent GPUs. MoE layers need CUDA streams and do not build here.

Setup (megatron-core 0.19.2's wheel is cp312 but its Python imports on 3.11; it needs triton):
    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d /tmp/w megatron-core==0.19.2
    mkdir -p /tmp/mcsrc && unzip -q -o /tmp/w/megatron_core-0.19.2-*.whl -d /tmp/mcsrc
    pip install --no-deps --target /tmp/mcdeps triton einops
Run (one rank, then TP=2 over two gloo ranks):
    PYTHONPATH=/tmp/mcsrc:/tmp/mcdeps python tools/device/cpu_harness.py
    PYTHONPATH=/tmp/mcsrc:/tmp/mcdeps python -m torch.distributed.run --nproc-per-node 2 tools/device/cpu_harness.py
Prints, per family, the fp32 logit error vs transformers (dense and, on one rank, packed THD)
and whether the HF -> Megatron -> HF export is bit-exact.
"""
import os
import sys
from pathlib import Path

import torch

torch.cuda.current_device = lambda: "cpu"  # the redirection described above
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "gpu")]

import parity as P  # noqa: E402


def main():
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    from rlrun.train.megatron.weights import export_hf
    P.init_dist("gloo")
    tp, rank = dist.get_world_size(), dist.get_rank()
    for family, conf in sorted(P.ARCHS.items()):
        torch.manual_seed(3)
        model = P.small_model(conf)
        hf = P.hf_causal_lm(model, torch.float32).eval()
        gpt = P.megatron_from_hf(model, hf, P.parallelism(tp=tp), torch.float32, cpu_init=True)
        ids = torch.randint(0, model.vocab_size, (2, 64))
        dist.broadcast(ids, 0)
        pos = torch.arange(64)[None].expand(2, -1)
        with torch.no_grad():
            err = P.rel_err(gather_from_tensor_model_parallel_region(gpt(ids, pos, attention_mask=None)),
                            hf(ids).logits)
            packed = None
            if tp == 1:
                lens = [20, 7, 37]
                seqs = [torch.randint(0, model.vocab_size, (n,)) for n in lens]
                posp = torch.cat([torch.arange(n) for n in lens])[None]
                out = gpt(torch.cat(seqs)[None], posp, attention_mask=None,
                          packed_seq_params=P.packed_params(lens, "cpu"))
                packed = P.rel_err(out[0], torch.cat([hf(s[None]).logits[0] for s in seqs]))
        sd = hf.state_dict()
        got = {k: v for b in export_hf(gpt, model, bucket_bytes=1 << 20) for k, v in b}
        want = set(sd) - ({"lm_head.weight"} if model.tie_word_embeddings else set())
        exact = set(got) == want and all(torch.equal(got[k], sd[k]) for k in want)
        if rank == 0:
            print(f"CPU tp={tp} {family}: fp32 rel_err={err:.2e}"
                  + (f" packed={packed:.2e}" if packed is not None else "") + f" export_exact={exact}", flush=True)
        ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29577")
    main()
