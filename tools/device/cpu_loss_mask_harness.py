"""tests/gpu/test_megatron_loss_mask.py's two checks on the real megatron backend with the device
pointed at the CPU (cpu_backend_harness.py's redirections; eager micro-batches only, CUDA graphs
need a GPU). A development aid, not a test double: the shipped check is the GPU test.

Setup as in cpu_harness.py (/tmp/mcsrc: megatron-core 0.19.2 unzipped; /tmp/mcdeps: triton, einops):
    PYTHONPATH=src:/tmp/mcsrc:/tmp/mcdeps python tools/device/cpu_loss_mask_harness.py
"""
import os
import sys
from pathlib import Path

import torch

os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools" / "device"), str(ROOT / "tests" / "gpu")]

import cpu_backend_harness as harness  # noqa: E402  (redirects CUDA to the CPU on import)
import test_megatron_loss_mask as checks  # noqa: E402


def main():
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    harness._cpu_config()
    backend = MegatronBackend(load(checks.OVERRIDES + ["train.cuda_graphs=false"]), rank=0, world_size=1, gpu_id=0,
                              total_steps=10)
    backend.device = torch.device("cpu")
    backend.init("127.0.0.1", 0)
    backend.opt.step = lambda: (True, 0.0, None)  # as the GPU test's fixture
    checks.test_masked_tokens_have_no_effect(backend)
    checks.test_offpolicy_mask_is_the_loss_mask(backend)
    print("LOSSMASK CPU harness: both checks OK")
    backend.shutdown()


if __name__ == "__main__":
    main()
