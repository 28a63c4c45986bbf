"""TP=2 vs TP=1 on two GPUs (tp_check.py under torchrun; skipped with fewer GPUs)."""
import os
import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (device kind nvidia-h200-x2)")
def test_tp2_matches_tp1():
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    here = os.path.dirname(__file__)
    # Output streams straight through (a hang must still leave its log); timeout < callers' limits.
    log = os.path.join(os.environ.get("OUT", "/tmp"), "tp_check.log")
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                             "--master-port", "29611", os.path.join(here, "tp_check.py")],
                            env=env, stdout=f, stderr=subprocess.STDOUT, timeout=240).returncode
    text = open(log).read()
    print("\n".join(line for line in text.splitlines() if line.startswith("TP2")))
    assert rc == 0 and "TP2 ALL OK" in text, text[-4000:]
