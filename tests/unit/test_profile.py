"""debug.profile_steps' trace files and the CUDA out-of-memory message (the OOM path itself needs a GPU:
its message is checked here, the snapshot call is torch's own)."""
from __future__ import annotations

import json

import pytest
import torch

from rlrun.train.profile import StepProfiler, dump_oom_snapshot, oom_message, trace_path


def test_step_profiler_writes_a_chrome_trace_that_loads(tmp_path):
    p = StepProfiler()
    p.start()
    x = torch.randn(64, 64)
    (x @ x).sum()
    out = p.stop(trace_path(tmp_path, 3, 1))
    assert out == str(tmp_path / "profile" / "rollout_000003" / "trainer_rank1.json")
    trace = json.loads(open(out).read())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::mm" in names  # the matmul above was traced


def test_oom_message_puts_the_measured_peak_beside_the_estimate():
    msg = oom_message(rank=2, method="train_step", peak_gib=79.25, total_gib=79.6, estimate_gib=61.0,
                      snapshot="/r/memory/oom_rank2.pickle")
    assert msg.startswith("CUDA out of memory on trainer rank 2 in train_step: measured peak 79.2 GiB of 79.6 GiB, "
                          "the plan estimated 61.0 GiB per trainer GPU")
    assert "/r/memory/oom_rank2.pickle" in msg and "https://pytorch.org/memory_viz" in msg
    assert "no trainer memory estimate" in oom_message(0, "x", 1.0, None, None, None)


def test_oom_snapshot_failure_is_said_not_raised(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("on a GPU the dump works; this checks the path where it cannot")
    assert dump_oom_snapshot(tmp_path, 0) is None
    assert "could not write the memory snapshot" in capsys.readouterr().out
    assert dump_oom_snapshot(None, 0) is None
