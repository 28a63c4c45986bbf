"""The debug: rules, the engines' profile pass-through (the hf engine answers 501), and the wandb sample
table (offline)."""
from __future__ import annotations

import json

import pytest

from rlrun.config import ConfigError, load


def _problems(*overrides):
    with pytest.raises(ConfigError) as e:
        load(list(overrides))
    return {p.path: p.message for p in e.value.problems}


def test_profile_steps_past_the_run_are_an_error():
    assert "steps [4, 9] are never reached" in _problems("rollout.num_rollout=4", "debug.profile_steps=[1,4,9]")[
        "debug.profile_steps"]
    assert load(["rollout.num_rollout=4", "debug.profile_steps=[3]"]).debug.profile_steps == [3]


def test_engine_profile_needs_steps_and_rollout_only_has_no_trainer_to_profile():
    assert "no step is profiled" in _problems("debug.profile_engines=true")["debug.profile_engines"]
    assert "never runs" in _problems("debug.rollout_only=true", "debug.profile_steps=[0]")["debug.profile_steps"]


def test_rollout_only_is_sync_only():
    assert "synchronous loop only" in _problems("debug.rollout_only=true", "experiment=tiny-grpo-async-cpu")[
        "debug.rollout_only"]


def test_bad_record_mode_is_a_schema_error():
    assert "logging.rollout_records" in _problems("logging.rollout_records=most")


def test_hf_engine_answers_501_to_profile_requests(tmp_path):
    from rlrun.rollout.engines.group import _profile
    from rlrun.rollout.hf_engine import HFEngine
    from rlrun.rollout.hf_server import ThreadedServer
    from rlrun.rollout.tiny_model import save_tiny_model

    engine = HFEngine.from_dir(save_tiny_model(tmp_path / "m", seed=0), seed=0)
    srv = ThreadedServer(engine)
    srv.start()
    try:
        assert _profile(srv.url, "/start_profile", {"output_dir": str(tmp_path)}) is False
        assert _profile(srv.url, "/stop_profile", {}) is False
    finally:
        srv.stop()
        engine.shutdown()


def test_sample_table_is_logged_to_wandb_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    from rlrun.metrics import MetricsLogger

    cfg = load(["logging.wandb.mode=offline", "logging.progress=false"])
    log = MetricsLogger(tmp_path, cfg, total=1)
    rows = [{"rollout_id": 0, "group_id": 0, "prompt": "12", "response": "2", "reward": 1.0, "status": "completed",
             "kept_index": 0}]
    log.log_samples(0, rows)
    log.log(0, {"rollout/reward_mean": 1.0})
    log.close()
    (table,) = tmp_path.glob("wandb/offline-run-*/files/media/table/samples_*.table.json")
    data = json.loads(table.read_text())
    assert data["columns"][:4] == ["rollout_id", "group_id", "prompt", "response"]
    assert data["data"] == [[0, 0, "12", "2", 1.0, "completed", 0]]
