"""rollout.weight_sync=delta's settings (rollout.delta.*): `rlrun validate` refuses what cannot work or would be
ignored, each with its dotted key and a fix; `rlrun plan` says how the deltas are made and where they go."""
from __future__ import annotations

import importlib.util

from config_problems import config_problems

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.render import summary_lines


def test_valid_delta_run_and_what_plan_says():
    cfg = load(["rollout.weight_sync=delta", "rollout.delta.encoding=overwrite", "rollout.delta.checksum=adler32",
                "rollout.delta.local_dir=/nvme/ckpt"])
    plan = make_plan(cfg)
    assert plan.weight_sync == "delta"
    assert plan.weight_sync_route == ("overwrite-encoded deltas, adler32 per tensor, published to <run dir>/weight_sync, "
                                      "pulled into /nvme/ckpt on each engine host; a full version every 50 syncs, "
                                      "older ones deleted")
    assert any(plan.weight_sync_route in line for line in summary_lines(plan))
    keep = make_plan(load(["rollout.weight_sync=delta", "rollout.delta.full_every=0"]))
    assert keep.weight_sync_route.endswith("; every version kept")
    got = config_problems(["rollout.weight_sync=disk", "rollout.delta.full_every=0"])  # set for another transport
    assert list(got) == ["rollout.delta.full_every"]


def test_relative_dirs_and_settings_for_another_transport_are_refused():
    got = config_problems(["rollout.weight_sync=delta", "rollout.delta.dir=shared/x"])
    assert list(got) == ["rollout.delta.dir"] and got["rollout.delta.dir"].fix == "give an absolute path"
    got = config_problems(["rollout.weight_sync=disk", "rollout.delta.encoding=overwrite", "rollout.delta.dir=/d"])
    assert sorted(got) == ["rollout.delta.dir", "rollout.delta.encoding"]
    assert "this run's transport is disk: it would be ignored" in got["rollout.delta.encoding"].message
    assert got["rollout.delta.dir"].fix == "set rollout.weight_sync=delta, or drop rollout.delta.dir"


def test_a_checksum_whose_package_is_missing_is_refused_naming_it():
    got = config_problems(["rollout.weight_sync=delta", "rollout.delta.checksum=blake3"])
    if importlib.util.find_spec("blake3") is None:  # not a dependency of rlrun: slime's optional digest
        assert list(got) == ["rollout.delta.checksum"] and "pip install blake3" in got["rollout.delta.checksum"].fix
    else:
        assert got == {}
    assert config_problems(["rollout.weight_sync=delta", "rollout.delta.checksum=md5"])  # not one of slime's three


def test_a_run_dir_saved_before_rollout_delta_existed_still_loads_for_calibration(tmp_path):
    import json

    import yaml

    from rlrun.config.calibrate import load_run, with_later_defaults

    raw = load(["rollout.weight_sync=disk", "optim.lr=3e-4"]).to_dict()
    del raw["rollout"]["delta"]  # what a run dir of 2026-11-28 holds
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "plan.json").write_text(json.dumps({}))
    cfg, _, _ = load_run(tmp_path)
    assert (cfg.rollout.weight_sync, cfg.optim.lr) == ("disk", 3e-4)  # the run's own values
    assert (cfg.rollout.delta.encoding, cfg.rollout.delta.dir) == ("xor", None)  # conf/'s defaults
    assert with_later_defaults({"a": {"b": 1}}, {"a": {"b": 2, "c": 3}, "d": None}) == {"a": {"b": 1, "c": 3}, "d": None}
