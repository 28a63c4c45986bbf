"""The composition cache: a repeat skips Hydra entirely, and editing a YAML file invalidates it."""
import json
import subprocess
import sys

from rlrun.config import load

PROBE = ("import sys, json; from rlrun.config import load; cfg = load({ov!r}, config_dir={d!r}); "
         "print(json.dumps({{'lr': cfg.optim.lr, 'hydra': 'hydra' in sys.modules}}))")


def _probe(tmp_path, overrides, env):
    code = PROBE.format(ov=overrides, d=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_repeat_skips_hydra_and_edits_invalidate(tmp_path, monkeypatch):
    import os

    env = dict(os.environ, RLRUN_CACHE_DIR=str(tmp_path / "cache"))
    (tmp_path / "experiment").mkdir()
    exp = tmp_path / "experiment" / "mine.yaml"
    exp.write_text("# @package _global_\noptim:\n  lr: 0.5\n")
    assert _probe(tmp_path, ["experiment=mine"], env) == {"lr": 0.5, "hydra": True}   # composed by Hydra
    assert _probe(tmp_path, ["experiment=mine"], env) == {"lr": 0.5, "hydra": False}  # cache hit
    exp.write_text("# @package _global_\noptim:\n  lr: 0.25\n")                      # size changes too
    assert _probe(tmp_path, ["experiment=mine"], env) == {"lr": 0.25, "hydra": True}


def test_cache_resolves_interpolations_on_every_use(tmp_path, monkeypatch):
    monkeypatch.setenv("RLRUN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RLRUN_TEST_NAME", "first")
    assert load(["run.name=${oc.env:RLRUN_TEST_NAME}"]).run.name == "first"
    monkeypatch.setenv("RLRUN_TEST_NAME", "second")
    assert load(["run.name=${oc.env:RLRUN_TEST_NAME}"]).run.name == "second"
    monkeypatch.setenv("RLRUN_NO_CACHE", "1")
    assert load(["model.name=x"]).run.name == "x-grpo-cpu"


def test_use_cache_false_neither_writes_nor_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("RLRUN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLRUN_NO_CACHE", raising=False)
    entries = lambda: sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file())  # noqa: E731
    assert load(["optim.lr=0.125"], use_cache=False).optim.lr == 0.125
    assert entries() == []                       # a throwaway composition leaves nothing behind
    load(["optim.lr=0.125"])
    assert len(entries()) == 1                   # the same composition with the cache writes one entry
