"""The preflight (rlrun.launch.preflight): one test per defect class, each with the dotted key and the
location it must name, plus all problems at once and the CLI paths (`rlrun validate --check-paths`,
`rlrun run` stopping before the run dir and Ray)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlrun.config import load
from rlrun.launch import preflight as pf
from rlrun.config.plan import make_plan
from rlrun.launch.preflight import checkpoint_bytes, checkpoint_count, preflight

QWEN3_4B = Path(__file__).resolve().parent / "invalid_configs" / "slime" / "base" / "Qwen3-4B"
ROOT = os.geteuid() == 0  # root reads and writes anything: permission tests then deny through os.access


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(autouse=True)
def roomy_disk(monkeypatch):
    """The disk check reads the machine's free space, and one Qwen3-4B checkpoint needs 56 GB (4.02 B params x
    14 B): with 52 GiB free a fresh-clone run failed two HF tests here on a run.output_dir problem. Every test
    sees 1 PiB free; the disk tests set their own free space."""
    real = pf.shutil.disk_usage
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda p: real(p)._replace(free=2 ** 50))


def cfg_with(tmp_path: Path, *overrides: str):
    return load([f"run.output_dir={tmp_path / 'outputs'}", *overrides])


def with_checkpoint(cfg, **paths):
    """cfg with checkpoint paths set after loading: validate's own HF rule reads an existing checkpoint.hf, and
    these tests are about what only the preflight sees (e.g. a folder made after `rlrun validate` ran)."""
    return cfg.model_copy(update={"checkpoint": cfg.checkpoint.model_copy(update=paths)})


def paths(problems) -> list[str]:
    return [p.path for p in problems]


def deny(monkeypatch, path: Path) -> None:
    """Make `path` unreadable/unwritable: chmod, and for root (whom chmod does not stop) os.access too."""
    path.chmod(0o000)
    if ROOT:
        real = os.access
        monkeypatch.setattr(pf.os, "access", lambda p, mode: False if Path(p) == path else real(p, mode))


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", [{"input": "2+2?", "label": "4"}, {"input": "3+3?", "label": "6"}])


def test_a_good_config_has_no_problems(tmp_path, data):
    assert preflight(cfg_with(tmp_path, f"data.prompt_data={data}")) == []


def test_missing_file_names_the_key_and_the_nearest_folder(tmp_path):
    problems = preflight(cfg_with(tmp_path, f"data.prompt_data={tmp_path}/nope/train.jsonl"))
    assert paths(problems) == ["data.prompt_data"]
    assert "does not exist" in problems[0].message and f"nearest existing folder is {tmp_path}" in problems[0].message


def test_unreadable_file(tmp_path, data, monkeypatch):
    deny(monkeypatch, data)
    try:
        problems = preflight(cfg_with(tmp_path, f"data.prompt_data={data}"))
    finally:
        data.chmod(0o644)
    assert paths(problems) == ["data.prompt_data"] and "not readable" in problems[0].message


def test_undecodable_file_is_reported_not_raised(tmp_path):
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b'{"input": "\xff\xfe"}\n')
    problems = preflight(cfg_with(tmp_path, f"data.prompt_data={bad}"))
    assert paths(problems) == ["data.prompt_data"] and "UnicodeDecodeError" in problems[0].message


def test_bad_row_names_file_and_line(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [{"input": "a", "label": "1"}, {"input": "b", "label": "2"}, '{"input": "c",'])
    problems = preflight(cfg_with(tmp_path, f"data.prompt_data={f}"))
    assert paths(problems) == ["data.prompt_data"] and f"{f}:3: not valid JSON" in problems[0].message


def test_missing_input_key_blames_data_input_key(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "label": "1"}])
    problems = preflight(cfg_with(tmp_path, f"data.prompt_data={f}"))
    assert paths(problems) == ["data.input_key"]
    assert f"{f}:1: row has no key 'input'" in problems[0].message and "['label', 'prompt']" in problems[0].message


def test_parquet_row_without_label_blames_data_label_key(tmp_path):
    f = tmp_path / "t.parquet"
    pq.write_table(pa.table({"input": ["a", "b"], "answer": ["1", "2"]}), f)
    problems = preflight(cfg_with(tmp_path, f"data.prompt_data={f}"))
    assert paths(problems) == ["data.label_key"] and f"{f}:row 0" in problems[0].message


def test_eval_dataset_path_is_checked(tmp_path, data):
    problems = preflight(cfg_with(tmp_path, f"data.prompt_data={data}",
                                  f"eval.datasets=[{{name: a, path: {tmp_path}/aime.jsonl, rm_type: math}}]"))
    assert paths(problems) == ["eval.datasets.0.path"]


def hf_folder(path: Path, config: str) -> Path:
    """A model folder as the preflight reads it: config.json plus (empty) weight and tokenizer files."""
    path.mkdir()
    (path / "config.json").write_text(config)
    (path / "model.safetensors").write_bytes(b"")
    (path / "tokenizer.json").write_text("{}")
    return path


def test_hf_config_mismatch(tmp_path, gpu_machine):
    hf = hf_folder(tmp_path / "Qwen3-4B", (QWEN3_4B / "config.json").read_text().replace(
        '"num_key_value_heads": 8', '"num_key_value_heads": 4'))
    cfg = with_checkpoint(load(["model=qwen3-4b", "hardware=h100", f"run.output_dir={tmp_path}"]), hf=str(hf),
                          ref=str(hf))
    problems = preflight(cfg)
    assert paths(problems) == ["model.num_query_groups"] and "(4)" in problems[0].message


def test_hf_folder_without_weights_or_tokenizer(tmp_path, gpu_machine):
    hf = hf_folder(tmp_path / "Qwen3-4B", (QWEN3_4B / "config.json").read_text())
    (hf / "model.safetensors").unlink()
    (hf / "tokenizer.json").unlink()
    cfg = with_checkpoint(load(["model=qwen3-4b", "hardware=h100", f"run.output_dir={tmp_path}"]), hf=str(hf),
                          ref=str(hf))
    problems = preflight(cfg)
    assert paths(problems) == ["checkpoint.hf", "checkpoint.hf"]
    assert "no weights (*.safetensors)" in problems[0].message and "no tokenizer files" in problems[1].message


def test_hf_folder_without_config_json(tmp_path):
    (tmp_path / "hf").mkdir()
    problems = preflight(with_checkpoint(cfg_with(tmp_path), hf=str(tmp_path / "hf")))
    assert paths(problems) == ["checkpoint.hf"] and "no config.json" in problems[0].message


def test_checkpoint_load_without_a_complete_checkpoint(tmp_path):
    (tmp_path / "ckpt").mkdir()
    problems = preflight(cfg_with(tmp_path, f"checkpoint.load={tmp_path / 'ckpt'}"))
    assert paths(problems) == ["checkpoint.load"] and "no complete checkpoint" in problems[0].message


def test_custom_reward_module_must_be_importable(tmp_path):
    assert paths(preflight(cfg_with(tmp_path, "data.rm_type=no_such_pkg.rewards:score"))) == ["data.rm_type"]
    assert preflight(cfg_with(tmp_path, "data.rm_type=rlrun.reward.rules:exact_match")) == []


def test_output_dir_under_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    problems = preflight(load([f"run.output_dir={tmp_path / 'f' / 'outputs'}"]))
    assert paths(problems) == ["run.output_dir"] and "is a file" in problems[0].message


def test_unwritable_output_dir(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    deny(monkeypatch, locked)
    try:
        problems = preflight(load([f"run.output_dir={locked / 'outputs'}"]))
    finally:
        locked.chmod(0o755)
    assert paths(problems) == ["run.output_dir"] and f"it would be made inside {locked}" in problems[0].message


def test_checkpoint_arithmetic():
    cfg = load(["experiment=qwen3-4b-grpo-mi300x"])
    # 3000 rollouts, a save every 20: 150 saves (the final one is the 150th); megatron fp32 Adam: 2+4+8 B/param
    assert checkpoint_count(cfg) == 150 and checkpoint_bytes(cfg, 10) == 140
    odd = load(["experiment=qwen3-4b-grpo-mi300x", "rollout.num_rollout=45"])
    assert checkpoint_count(odd) == 3  # saves after 20, 40 and the final 45
    # keep_last=K: K kept + the new one, complete before the oldest is deleted; never more than the saves
    assert checkpoint_count(load(["experiment=qwen3-4b-grpo-mi300x", "checkpoint.keep_last=2"])) == 3
    assert checkpoint_count(load(["experiment=qwen3-4b-grpo-mi300x", "rollout.num_rollout=45",
                                  "checkpoint.keep_last=5"])) == 3
    lean = load(["experiment=qwen3-4b-grpo-mi300x", "optim.state_dtype=bf16", "hardware=h100"])
    assert checkpoint_bytes(lean, 10) == 100


def test_too_little_disk(tmp_path, monkeypatch):
    cfg = cfg_with(tmp_path, "rollout.num_rollout=10", "checkpoint.save_interval=2")
    plan = make_plan(cfg)
    need = 5 * checkpoint_bytes(cfg, plan.params_total)
    free = {"free": need - 1}
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda p: type("U", (), free)())
    problems = preflight(cfg, plan)
    assert paths(problems) == ["checkpoint.save_interval"] and "5 checkpoint(s)" in problems[0].message
    assert "4 checkpoint(s) fit" in problems[0].fix and "checkpoint.keep_last=3: 3 kept" in problems[0].fix
    free["free"] = need
    assert preflight(cfg, plan) == []
    # keeping 3 needs room for 4 at the peak: blamed on the key the user set
    free["free"] = 4 * checkpoint_bytes(cfg, plan.params_total) - 1
    kept = cfg_with(tmp_path, "rollout.num_rollout=10", "checkpoint.save_interval=2", "checkpoint.keep_last=3")
    problems = preflight(kept, plan)
    assert paths(problems) == ["checkpoint.keep_last"] and "4 checkpoint(s)" in problems[0].message
    assert "checkpoint.keep_last=2" in problems[0].fix
    assert preflight(cfg_with(tmp_path, "rollout.num_rollout=10", "checkpoint.save_interval=2",
                              "checkpoint.keep_last=2"), plan) == []


def test_a_fixed_router_port_must_be_free(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        problems = preflight(cfg_with(tmp_path, f"rollout.router.port={port}"))
        assert paths(problems) == ["rollout.router.port"] and f"127.0.0.1:{port}" in problems[0].message
        assert "Address already in use" in problems[0].message and "null to let rlrun pick" in problems[0].fix
    assert preflight(cfg_with(tmp_path, f"rollout.router.port={port}")) == []  # closed: free again
    assert preflight(cfg_with(tmp_path, "rollout.router.port=null")) == []


def test_wandb_online_needs_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    cfg = cfg_with(tmp_path, "logging.wandb.mode=online")
    problems = preflight(cfg)
    assert paths(problems) == ["logging.wandb.mode"] and "api.wandb.ai" in problems[0].message
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password k3y\n")
    (tmp_path / "netrc").chmod(0o600)
    assert preflight(cfg) == []
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("WANDB_API_KEY", "k3y")
    assert preflight(cfg) == []


def test_every_problem_at_once(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    (tmp_path / "f").write_text("")
    problems = preflight(load([f"run.output_dir={tmp_path / 'f' / 'o'}", f"data.prompt_data={tmp_path}/x.jsonl",
                               f"checkpoint.hf={tmp_path}/hf", "logging.wandb.mode=online"]))
    assert sorted(paths(problems)) == ["checkpoint.hf", "data.prompt_data", "logging.wandb.mode", "run.output_dir"]


# ---- through the CLI ---------------------------------------------------------------------------------------
# CPU seconds of main() (process_time): the budget is about the work done, not about how many other processes
# share the cores (the 2-core CI machine measured 1.1-2.9 s wall for the whole command at a load of 18)
RUN = ("import sys, time; from rlrun.cli import main; t = time.process_time(); rc = main(sys.argv[1:]); "
       "print('RESULT', rc, round(time.process_time() - t, 3), 'ray' in sys.modules, 'torch' in sys.modules)")


def cli(*argv: str, cwd: Path) -> tuple[int, float, bool, bool, str]:
    p = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, timeout=120, cwd=cwd)
    rc, secs, ray, torch = p.stdout.split("RESULT ")[1].split()
    return int(rc), float(secs), ray == "True", torch == "True", p.stderr


def test_validate_check_paths_reports_and_plain_validate_does_not(tmp_path):
    missing = f"data.prompt_data={tmp_path}/none.jsonl"
    assert cli("validate", missing, cwd=tmp_path)[0] == 0  # the config alone is valid
    rc, _, _, _, err = cli("validate", "--check-paths", missing, cwd=tmp_path)
    assert rc == 2 and "data.prompt_data" in err and "does not exist" in err


def test_run_stops_before_the_run_dir_and_ray(tmp_path):
    """The seed recipe with a missing checkpoint: `rlrun run` exits 2 within 2 CPU seconds (the issue's bound;
    measured ~0.5), with no run dir made and neither ray nor torch imported."""
    data = write_jsonl(tmp_path / "small.jsonl", [{"prompt": f"q{i}", "label": str(i)} for i in range(64)])
    rc, secs, ray, torch, err = cli("run", "experiment=qwen3-4b-grpo-mi300x", f"data.prompt_data={data}",
                                    f"run.output_dir={tmp_path / 'out'}", "eval.interval=null", "eval.datasets=[]",
                                    f"checkpoint.hf={tmp_path}/Qwen3-4B", "checkpoint.load=null",
                                    "checkpoint.ref=null", f"checkpoint.save={tmp_path / 'ckpt'}", cwd=tmp_path)
    assert rc == 2 and "checkpoint.hf" in err and "does not exist" in err, err
    assert not (tmp_path / "out").exists() and not ray and not torch
    assert secs < 2.0, secs


def test_preflight_time_on_the_seed_recipe(tmp_path, gpu_machine):
    """A seed recipe whose paths all exist (HF config.json, 1000-row data file): measured, not just bounded."""
    hf = hf_folder(tmp_path / "Qwen3-4B", (QWEN3_4B / "config.json").read_text())
    data = write_jsonl(tmp_path / "small.jsonl", [{"prompt": f"q{i}", "label": str(i)} for i in range(1000)])
    cfg = load(["experiment=qwen3-4b-grpo-mi300x", f"data.prompt_data={data}", "eval.interval=null",
                "eval.datasets=[]", "checkpoint.load=null", f"run.output_dir={tmp_path}", "checkpoint.save_interval=null"])
    cfg = with_checkpoint(cfg, hf=str(hf), ref=str(hf), save=str(tmp_path / "c"))
    plan = make_plan(cfg)
    t = time.process_time()  # CPU time: see RUN
    problems = preflight(cfg, plan)
    secs = time.process_time() - t
    assert problems == [], problems
    # the data is read with the run's tokenizer (labels vs rollout.max_response_len, <unk> prompts): importing
    # transformers alone takes ~2.3 CPU s on this machine (2026-11-28); the rest of the preflight ~0.3 s
    assert secs < 6.0, secs


def test_a_sweep_checks_every_point_before_any_run_dir(tmp_path, data):
    from rlrun.config import ConfigError
    from rlrun.sweep import expand, launch, validate_points

    planned = validate_points(expand([f"run.output_dir={tmp_path / 'out'}",
                                      f"data.prompt_data={data},{tmp_path}/missing.jsonl"]))
    with pytest.raises(ConfigError) as exc:
        launch(planned, root=tmp_path / "sweep")
    assert exc.value.paths == ["data.prompt_data"] and "[point data.prompt_data=" in exc.value.render()
    assert not (tmp_path / "sweep").exists()


def torch_dist_folder(path: Path, iteration: int | None = 0) -> Path:
    """A Megatron torch_dist save as slime's --ref-load names it: the tracker file and iter_0000000/ with the
    .metadata and __*.distcp shards megatron-core's dist_checkpointing writes (empty: only their names count)."""
    shards = path / f"iter_{iteration:07d}" if iteration is not None else path
    shards.mkdir(parents=True)
    (shards / ".metadata").write_bytes(b"")
    (shards / "__0_0.distcp").write_bytes(b"")
    if iteration is not None:
        (path / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return path


def test_torch_dist_ref_beside_hf_is_read_from_the_hf_weights(tmp_path, gpu_machine):
    from rlrun.config.torch_dist import dist_checkpoint_dir, ref_weights

    hf = hf_folder(tmp_path / "Qwen3-4B", (QWEN3_4B / "config.json").read_text())
    ref = torch_dist_folder(tmp_path / "Qwen3-4B_torch_dist")
    assert dist_checkpoint_dir(ref) == ref / "iter_0000000"
    assert dist_checkpoint_dir(torch_dist_folder(tmp_path / "bare", None)) == tmp_path / "bare"
    assert dist_checkpoint_dir(hf) is None
    cfg = with_checkpoint(load(["model=qwen3-4b", "hardware=h100", f"run.output_dir={tmp_path}"]), hf=str(hf),
                          ref=str(ref))
    assert preflight(cfg) == []
    got, note = ref_weights(str(ref), str(hf))
    assert got == str(hf) and "torch_dist" in note and str(hf) in note
    assert ref_weights(str(hf), str(hf)) == (str(hf), None)


def test_torch_dist_ref_without_hf_is_read_by_megatron_only(tmp_path):
    ref = torch_dist_folder(tmp_path / "ref")
    problems = preflight(with_checkpoint(cfg_with(tmp_path, "train.backend=torch"), hf=None, ref=str(ref)))
    assert paths(problems) == ["checkpoint.ref"] and "torch_dist" in problems[0].message
    assert "train.backend=megatron" in problems[0].fix
    # the megatron backend loads it with megatron-core's dist_checkpointing (rlrun.train.megatron.dist_ckpt)
    meg = cfg_with(tmp_path, "train.backend=megatron", "hardware=h100", "rollout.engine=sglang")
    assert "checkpoint.ref" not in paths(preflight(with_checkpoint(meg, hf=None, ref=str(ref))))


def test_a_tracker_naming_a_missing_iteration_is_no_torch_dist_checkpoint(tmp_path):
    from rlrun.config.torch_dist import dist_checkpoint_dir

    ref = torch_dist_folder(tmp_path / "ref")
    (ref / "latest_checkpointed_iteration.txt").write_text("20")
    assert dist_checkpoint_dir(ref) is None
    problems = preflight(with_checkpoint(cfg_with(tmp_path), ref=str(ref)))
    assert "checkpoint.ref" in paths(problems)  # then it must hold HF weights, and it does not
