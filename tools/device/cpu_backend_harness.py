"""The megatron backend's TP=2 train step on the CPU over gloo: what tests/gpu/tp_check.py runs
on two GPUs (backend at TP=2 vs TP=1 x DP=2, same global batch: loss, grad norm, log-probs),
with the device pointed at the CPU. A development aid like cpu_harness.py (same setup, see its
docstring), not a test double: the shipped check is tp_check.py on the lent GPUs.

    PYTHONPATH=/tmp/mcsrc:/tmp/mcdeps python -m torch.distributed.run --nproc-per-node 2 \
        tools/device/cpu_backend_harness.py

Redirections (megatron-core assumes CUDA in a few places): torch.cuda.current_device -> "cpu",
device="cuda" in torch's factory functions and Tensor.cuda() -> the CPU,
parameters initialised on the CPU (use_cpu_initialization; the HF weights are loaded over them),
the backend's device set to cpu before init() (gloo instead of NCCL), fp32 instead of bf16
(gloo reduces no bf16).
"""
import faulthandler
import os
import sys
from pathlib import Path

import torch

torch.cuda.current_device = lambda: "cpu"


def _redirect_cuda() -> None:
    """megatron-core's optimizer makes a few tensors with device='cuda' or .cuda(): make them here."""
    def cpu(fn):
        def wrapped(*a, **k):
            if str(k.get("device", "")).startswith("cuda"):
                k["device"] = "cpu"
            return fn(*a, **k)
        return wrapped
    for name in ("tensor", "zeros", "ones", "empty", "full", "arange", "zeros_like", "empty_like"):
        setattr(torch, name, cpu(getattr(torch, name)))
    torch.Tensor.cuda = lambda self, *a, **k: self
    type_of = torch.Tensor.type

    def cuda_type(self, *a, **k):  # the distributed optimizer accepts only 'torch.cuda.*Tensor' params
        t = type_of(self, *a, **k)
        return t.replace("torch.", "torch.cuda.", 1) if not a and not k and isinstance(t, str) else t
    torch.Tensor.type = cuda_type

    class NoStream:  # the grad buffer waits on the current stream for CUDA-graph events: none here
        def wait_event(self, *_):
            pass

        def wait_stream(self, *_):
            pass
    torch.cuda.current_stream = lambda *a, **k: NoStream()
    torch.cuda.synchronize = lambda *a, **k: None


_redirect_cuda()
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "gpu")]

import tp_check  # noqa: E402


def _cpu_config():
    from rlrun.train.megatron import model as mm
    build = mm.transformer_config

    def cpu_config(model, parallelism, train=None, **kw):
        kw.update(cpu_init=True, dtype=torch.float32)
        return build(model, parallelism, train, **kw)
    mm.transformer_config = cpu_config


def main():
    faulthandler.dump_traceback_later(float(os.environ.get("TP_CHECK_DUMP_S", 300)), exit=True)
    _cpu_config()
    # fp32 on both layouts: only the reduction order differs, so a far tighter bound than bf16's
    tp_check.compare_backends("cpu", tol=1e-4)


if __name__ == "__main__":
    main()
