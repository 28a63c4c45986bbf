"""The sglang engine's process handling, run for real with stand-in launchers (SGLang itself cannot
run here: it pins torch 2.9.1). The argv it builds is checked against ServerArgs in
tests/unit/test_rollout_sglang_contract.py."""
import sys

import pytest
import requests

from rlrun.config import load
from rlrun.rollout.process import free_port
from rlrun.rollout.engines.sglang.engine import SGLangEngine, engine_slot
from rlrun.rollout.tiny_model import save_tiny_model


def test_a_server_that_dies_at_startup_raises_with_its_log_tail(tmp_path):
    crash = (sys.executable, "-c", "import sys; print('CUDA error: out of memory (fake)'); sys.exit(3)")
    engine = SGLangEngine({"host": "127.0.0.1", "port": free_port()}, log_dir=tmp_path, launcher=crash)
    with pytest.raises(RuntimeError, match=r"(?s)exited with code 3.*CUDA error: out of memory \(fake\)"):
        engine.start(timeout_s=30)


def test_a_server_that_never_gets_healthy_times_out_with_its_log_tail(tmp_path):
    hang = (sys.executable, "-c", "import time; print('loading weights 10%', flush=True); time.sleep(60)")
    engine = SGLangEngine({"host": "127.0.0.1", "port": free_port()}, log_dir=tmp_path, launcher=hang)
    with pytest.raises(TimeoutError, match=r"(?s)not healthy.*loading weights 10%"):
        engine.start(timeout_s=3)
    assert not engine.alive()  # the hung server was killed


def test_health_generate_polling_with_a_server_speaking_sglangs_api(tmp_path):
    """The hf engine answers /health_generate like SGLang: start() returns once it can generate."""
    model_dir = save_tiny_model(tmp_path / "tiny")
    launcher = (sys.executable, "-m", "rlrun.rollout.hf_engine", "--model-dir", str(model_dir))
    engine = SGLangEngine({"host": "127.0.0.1", "port": free_port()}, log_dir=tmp_path, launcher=launcher)
    try:
        url = engine.start(timeout_s=120)
        assert requests.get(f"{url}/health_generate", timeout=30).status_code == 200
    finally:
        engine.stop()
    assert not engine.alive()


def test_from_config_builds_the_sglang_command(tmp_path):
    cfg = load(["experiment=qwen3-4b-grpo-mi300x", "+rollout.sglang.cuda_graph_max_bs=128"])
    engine = SGLangEngine.from_config(cfg, rank=1, gpus=[2, 3], log_dir=tmp_path)
    argv = engine.argv
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert argv[argv.index("--base-gpu-id") + 1] == "2" and argv[argv.index("--tp-size") + 1] == "2"
    assert argv[argv.index("--random-seed") + 1] == str(cfg.run.seed + 1)
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "128"
    assert engine.url == f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"


def test_an_engine_started_directly_gets_the_runs_actor_env_under_the_callers(tmp_path):
    """from_config outside a run (a bench, a GPU test) starts the server with what a run's engine actor has
    (rlrun.config.plan.actor_env_vars: hardware.env, e.g. SGLang's DeepGEMM fast warm-up on an H200), the caller's
    env over it; the stand-in server prints what it got."""
    cfg = load(["hardware=h200", "model=qwen3-0.6b", "rollout.engine=sglang", "+hardware.env.RLRUN_TEST_X=from_cfg"])
    show = (sys.executable, "-c", "import os; print('ENV', os.environ['SGLANG_JIT_DEEPGEMM_FAST_WARMUP'], "
                                  "os.environ['NCCL_CUMEM_ENABLE'], os.environ['RLRUN_TEST_X'])")
    engine = SGLangEngine.from_config(cfg, rank=0, gpus=[0], log_dir=tmp_path, launcher=show,
                                      env={"RLRUN_TEST_X": "from_caller"})
    engine.process.start().proc.wait(timeout=30)
    assert "ENV 1 0 from_caller" in engine.process.log_path.read_text()


def test_engine_slot_uses_the_first_gpu():
    slot = engine_slot(rank=2, gpus=[5, 4])
    assert slot.base_gpu_id == 4 and slot.port != slot.nccl_port
