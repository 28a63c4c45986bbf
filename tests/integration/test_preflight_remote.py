"""The preflight on a cluster's head node (rlrun.launch.cluster.preflight_on_head), on a real embedded Ray:
the check runs as a Ray task pinned to the head node and its problems come back as a ConfigError."""
from __future__ import annotations

import json

import pytest
import ray

from rlrun.config import load
from rlrun.config.errors import ConfigError
from rlrun.config.plan import make_plan
from rlrun.launch.cluster import head_node_id, preflight_on_head

pytestmark = pytest.mark.timeout(120)


def _remote(tmp_path, *overrides):
    cfg = load([f"run.output_dir={tmp_path / 'out'}", "cluster.address=auto", *overrides])
    return cfg, make_plan(cfg)


def test_head_node_is_the_one_with_rays_head_resource():
    nodes = [{"NodeID": "w", "Alive": True, "Resources": {"CPU": 8.0}},
             {"NodeID": "h", "Alive": True, "Resources": {"CPU": 8.0, "node:__internal_head__": 1.0}}]
    assert head_node_id(nodes) == "h"
    assert head_node_id([{**nodes[1], "Alive": False}]) is None


def test_preflight_runs_on_the_head_and_reports_every_problem(ray_cpu, tmp_path):
    assert head_node_id(ray.nodes()) == ray.get_runtime_context().get_node_id()  # one node: the head
    cfg, plan = _remote(tmp_path, f"data.prompt_data={tmp_path}/missing.jsonl", "data.rm_type=no_such_pkg.r:f")
    with pytest.raises(ConfigError) as exc:
        preflight_on_head(cfg, plan)
    assert exc.value.paths == ["data.prompt_data", "data.rm_type"]


def test_preflight_on_head_passes_a_good_config_and_skips_local_clusters(ray_cpu, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"input": "q", "label": "a"}) + "\n")
    preflight_on_head(*_remote(tmp_path, f"data.prompt_data={data}"))  # no problem: returns
    local = load([f"data.prompt_data={tmp_path}/missing.jsonl"])  # cluster.address null: `rlrun run` checked it
    preflight_on_head(local, make_plan(local))
