import json

import yaml

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir, read_run_dir
from rlrun.config.schema import RunConfig


def test_run_dir_holds_the_four_files_and_round_trips(tmp_path):
    ov = [f"run.output_dir={tmp_path}"]
    cfg = load(ov)
    run_dir = prepare_run_dir(cfg, make_plan(cfg), ov)
    assert run_dir.parent == tmp_path / "tiny-grpo-cpu"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "overrides.yaml", "plan.json", "versions.json"]
    raw, overrides = read_run_dir(run_dir)
    assert RunConfig.model_validate(raw) == cfg and overrides == ov
    assert json.loads((run_dir / "plan.json").read_text())["global_batch_size"] == cfg.train.global_batch_size
    assert json.loads((run_dir / "versions.json").read_text())["pydantic"]


def test_resume_auto_reuses_newest_dir_with_checkpoints(tmp_path):
    ov = [f"run.output_dir={tmp_path}", "run.resume=auto"]
    cfg = load(ov)
    first = prepare_run_dir(cfg, make_plan(cfg), ov)
    assert prepare_run_dir(cfg, make_plan(cfg), ov) != first  # no checkpoints/ yet: fresh dir
    (first / "checkpoints").mkdir()
    again = prepare_run_dir(cfg, make_plan(cfg), ov)
    assert again == first and (first / "config.resume-1.yaml").exists()
    assert yaml.safe_load((first / "config.yaml").read_text())["run"]["resume"] == "auto"
