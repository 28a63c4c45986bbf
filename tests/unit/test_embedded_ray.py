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


MOE_DEEPEP = ["model=qwen3-30b-a3b", "parallelism=tp4_ep8", "hardware=h100", "train.backend=megatron",
              "checks.memory_fit=warn", "checkpoint.random_init=true", "+train.megatron.moe_token_dispatcher_type=flex",
              "+train.megatron.moe_enable_deepep=true"]


def test_deepep_is_asked_of_this_machine_not_of_the_config(tmp_path, monkeypatch, capsys):
    """train.megatron.moe_enable_deepep (megatron-core's flex dispatcher, deepep backend) is a valid config; the
    preflight names the setting and the fix where deep_ep is not importable (as here), and passes where it is."""
    from rlrun.cli import main

    assert main(["validate", *MOE_DEEPEP, f"run.output_dir={tmp_path}"]) == 0
    capsys.readouterr()
    assert main(["validate", "--check-paths", *MOE_DEEPEP, f"run.output_dir={tmp_path}"]) == 2
    out = capsys.readouterr()
    text = out.out + out.err
    assert "train.megatron.moe_enable_deepep: train.megatron.moe_enable_deepep=true needs the Python module deep_ep, " \
        "which this Python" in text, text
    assert "install DeepEP where the trainer runs" in text and "moe_token_dispatcher_type=alltoall" in text
    monkeypatch.setattr(pf, "GPU_COUNTERS", {vendor: (lambda: 32) for vendor in pf.GPU_COUNTERS})
    monkeypatch.setattr(pf, "importable", lambda module: True)
    assert embedded(pf.preflight(load([*MOE_DEEPEP, f"run.output_dir={tmp_path}"]))) == []
    monkeypatch.setattr(pf, "importable", lambda module: module != "deep_ep")
    got = [p for p in pf.preflight(load([*MOE_DEEPEP, f"run.output_dir={tmp_path}"])) if "deep_ep" in p.message]
    assert [(p.path, p.value) for p in got] == [("train.megatron.moe_enable_deepep", True)]
    # a remote cluster is not checked here (its workers' Python is not this one)
    assert not [p for p in pf.preflight(load([*MOE_DEEPEP, "cluster.address=10.0.0.1:6379",
                                              f"run.output_dir={tmp_path}"])) if "deep_ep" in p.message]


def test_sglang_deepep_all_to_all_is_asked_of_this_machine(tmp_path, monkeypatch):
    """rollout.sglang.moe_a2a_backend=deepep (slime's --sglang-moe-a2a-backend deepep) makes SGLang import deep_ep."""
    monkeypatch.setattr(pf, "GPU_COUNTERS", {vendor: (lambda: 32) for vendor in pf.GPU_COUNTERS})
    monkeypatch.setattr(pf, "importable", lambda module: module != "deep_ep")
    cfg = load(["model=qwen3-30b-a3b", "parallelism=tp4_ep8", "hardware=h100", "train.backend=megatron",
                "checks.memory_fit=warn", "checkpoint.random_init=true", "rollout.gpus_per_engine=8",
                "+rollout.sglang.moe_a2a_backend=deepep", "+rollout.sglang.ep_size=8", f"run.output_dir={tmp_path}"])
    got = [p for p in pf.preflight(cfg) if "deep_ep" in p.message]
    assert [(p.path, p.value) for p in got] == [("rollout.sglang.moe_a2a_backend", "deepep")]
    assert "install DeepEP where the SGLang engines run" in got[0].fix
    monkeypatch.setattr(pf, "importable", lambda module: True)
    assert not [p for p in pf.preflight(cfg) if "deep_ep" in p.message]
