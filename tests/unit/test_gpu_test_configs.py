"""Every config the GPU tests build passes the gate here, on the CPU: tests/gpu runs only on the lent GPUs, so a
gate rule that refuses one of its configs was found there, at the price of device time (2026-11-29: the
qwen3_moe head rules refused test_gpu_megatron_passthrough.py's tied head_dim-16 MoE, one of 81 tests, after a
22-minute run). Each module's own config function or constant is used, so this follows the tests as they change."""
import importlib
import sys
from pathlib import Path

import pytest

from rlrun.config import load

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu"


@pytest.fixture(scope="module")
def gpu_module():
    sys.path.insert(0, str(GPU_TESTS))  # tests/gpu's modules import each other by name, as pytest's rootdir does
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(GPU_TESTS))


@pytest.mark.parametrize("module, args", [
    ("test_sglang_engine", ()), ("test_sglang_fp8", ()), ("test_sglang_flattened_sync", ()),
    ("test_sglang_two_node_engine", ()), ("test_gpu_gathered_push", (2,)), ("test_gpu_gathered_push", (4,)),
])
def test_each_engine_tests_config_validates(gpu_module, module, args, tmp_path):
    cfg = gpu_module(module)._cfg(tmp_path, *args)  # load() raises ConfigError with every problem
    assert cfg.rollout.engine == "sglang"


def test_each_layouts_config_validates(gpu_module):
    layouts = gpu_module("test_gpu_multi_layouts").LAYOUTS
    assert len(layouts) == 5
    for name, (gpus, overrides) in layouts.items():
        cfg = load(overrides)
        assert cfg.train.num_gpus + (0 if cfg.train.colocate else cfg.rollout.num_gpus) == gpus, name


def test_the_megatron_pass_through_configs_validate(gpu_module):
    m = gpu_module("test_gpu_megatron_passthrough")
    for overrides in (m.BASE, [*m.BASE, *m.OFFLOAD], m.TINY_MOE):
        assert load(overrides).train.backend == "megatron"


def test_the_served_jobs_base_config_validates(gpu_module):
    """The reward-engine and served-teacher tests' job (tests/gpu/served_job.py) less their checkpoint paths."""
    kit = gpu_module("served_job").KIT
    assert load(["experiment=copy-grpo-h100", f"rollout.num_rollout={gpu_module('served_job').ROLLOUTS}", *kit])
