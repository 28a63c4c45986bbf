"""Without cluster.address the preflight checks the one-node Ray that `rlrun run` would start on this machine
(rlrun.launch.preflight.embedded_ray): the plan's GPUs as Ray counts them, and the engine's and backend's modules
(ENGINES / BACKENDS `requires`). This machine has no GPU, no sglang and no megatron-core: the headline command is
refused naming each; a cpu job and a remote cluster are not."""
from __future__ import annotations

import subprocess
import sys

import pytest

import rlrun.launch.preflight as pf
from rlrun.config import load

HEADLINE = ["model=qwen3-4b", "algo=grpo", "hardware=h100", "checkpoint.random_init=true"]


@pytest.fixture(autouse=True)
def this_machine():
    import importlib.util
    from pathlib import Path

    if Path("/proc/driver/nvidia/gpus").is_dir() or Path("/sys/class/kfd").is_dir() or \
            importlib.util.find_spec("sglang") is not None:
        pytest.skip("this test describes a machine without GPUs or sglang")


def embedded(problems):
    return [p for p in problems if p.path in ("hardware", "rollout.engine", "train.backend")]


def test_validate_check_paths_names_every_missing_thing_of_the_headline_command(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "validate", "--check-paths", *HEADLINE,
                        f"run.output_dir={tmp_path}"], text=True, capture_output=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    assert "hardware: the plan needs 8 GPUs; cluster.address is null, so the run would start Ray on this machine, " \
        "which has 0 cuda GPU(s)" in out, out
    assert "rollout.engine: rollout.engine=sglang needs the Python module sglang" in out
    assert "fix: pip install 'rlrun[sglang]' (docs/sglang.md), or choose another rollout.engine" in out
    assert "train.backend: train.backend=megatron needs the Python module megatron.core" in out


def test_run_refuses_it_before_ray_starts(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "run", *HEADLINE, f"run.output_dir={tmp_path}"],
                       text=True, capture_output=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "ResourceError" not in r.stderr, r.stderr
    assert "which has 0 cuda GPU(s)" in r.stdout + r.stderr
    assert not any(tmp_path.iterdir())  # refused before the run dir


def test_visible_devices_are_counted_as_ray_counts_them(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert pf._nvidia_gpus() == 0  # the variable names GPUs, but no driver lists any here
    assert pf._visible(["0,1,3"]) == 3 and pf._visible([""]) == 0 and pf._visible([None, "2"]) == 1
    assert pf._visible([None, None]) is None


def test_a_cpu_job_and_a_remote_cluster_are_not_checked_here(tmp_path):
    assert embedded(pf.preflight(load([f"run.output_dir={tmp_path}"]))) == []
    assert embedded(pf.preflight(load([*HEADLINE, "cluster.address=10.0.0.1:6379", f"run.output_dir={tmp_path}"]))) \
        == []
    assert embedded(pf.preflight(load([*HEADLINE, "run.dry_run=true", f"run.output_dir={tmp_path}"]))) == []  # no Ray
    # two nodes of the cpu profile: bookkeeping bundles on one embedded Ray, as rlrun.launch.cluster.start makes it
    assert embedded(pf.preflight(load(["train.num_nodes=2", "cluster.num_nodes=2", f"run.output_dir={tmp_path}"]))) \
        == []
